"""The studies: measurements about hfbert rather than parts of it.

- :mod:`.bench` -- ``hfbert bench``, hfbert against transformers' BERT side by side on changing batches;
- :mod:`.data_bench` -- throughput of the pretraining-data pipeline with 1 and 2 processes (used by the bench);
- :mod:`.faults` -- bit-flip injection into weights and activations, undone bitwise;
- :mod:`.robustness` -- ``hfbert robustness``, a fine-tuned classifier's accuracy under rising bit error rates.

The core modules (model, tokenizer, data, pretraining, tasks) never import from here.
"""
