"""hfbert against transformers' BERT side by side: the modules behind ``benchmarks/bench.py``."""
