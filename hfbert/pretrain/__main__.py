"""``python -m hfbert.pretrain`` (what ``accelerate launch -m hfbert.pretrain`` runs on every process)."""

from .command import main

raise SystemExit(main())
