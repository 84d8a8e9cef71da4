"""The Hub (hfbert.hub, push, pull, deadlines) and conversion (hfbert.convert, Google's checkpoints,
hfbert.tf_checkpoint). The local Hub servers (``hub_server``, ``silent_server``, ``trickle_server``) are fixtures of
tests/conftest.py, their code in tests/helpers/hub_server.py; the Google checkpoint folders are in tests/fixtures/."""
