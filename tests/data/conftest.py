"""Documents, NSP pairs, masking, the collator and prepared folders (hfbert.data). Real text (``shared_data``,
``peoples_daily_path``) and the tokenizer (``en_tok``) come from tests/conftest.py; the misbehaving ``flaky://``
filesystem from tests/helpers/flaky_filesystem.py, the local Hub from tests/helpers/hub_server.py."""
