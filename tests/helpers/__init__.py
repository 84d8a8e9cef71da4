"""Plain modules the tests import (``from helpers.pretraining import settings``): code that is not a fixture and
that tests of more than one folder use. Fixtures live in the conftest.py files; no test module imports another.

- ``pretraining``: the tiny model, the prepared folders and the run settings every pretraining test starts from,
  and the comparisons and subprocess drivers they share.
- ``hub_server``: a local Hub-protocol server (and a silent, a trickling and a failing one) for the unmodified
  clients.
- ``flaky_filesystem``: an fsspec filesystem (``flaky://``) whose shard reads hang, fail or come back short.
- ``bert_reference_tokenizer``: a pure-Python BERT tokenizer, the oracle of the tokenization tests.
- ``evaluation``: the words of the ``hfbert evaluate`` tests' tiny data, and the record of the recipe runs.
"""
