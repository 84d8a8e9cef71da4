"""The model (configuration, modeling, heads, attention backends, unpadding) against transformers' BERT. The tests
build their tiny configs themselves (google-research/bert's tester sizes); the real MiniLM checkpoint
(``minilm_path``) comes from tests/conftest.py."""
