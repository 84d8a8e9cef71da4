"""WordPiece training and the BERT tokenizer pipeline (hfbert.tokenization, hfbert.vocabulary). The oracle tokenizer is
tests/helpers/bert_reference_tokenizer.py; real text and vocabularies (``shared_data``, ``en_tok``, ``corpus``)
come from tests/conftest.py."""
