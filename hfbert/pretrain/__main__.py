"""``python -m hfbert.pretrain`` (what ``accelerate launch -m hfbert.pretrain`` runs on every process)."""

from .loop import main

raise SystemExit(main())
