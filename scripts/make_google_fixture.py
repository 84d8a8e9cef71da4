"""Build tiny checkpoints in the exact format of Google's released BERT checkpoints, with Google's own code.

Writes ``tests/fixtures/google_bert_tiny/`` (bert_config.json, vocab.txt, bert_model.ckpt.index,
bert_model.ckpt.data-00000-of-00001, expected.npz) and ``tests/fixtures/google_bert_tiny_padded/`` (the same
weights with the word embeddings and the MLM output bias padded to a multiple of 8 rows, as NVIDIA's checkpoints
are; its bert_config.json keeps the real vocab_size).  The tests read these files without TensorFlow.

TensorFlow is no dependency of hfbert: this script runs only in a separate environment, outside the repository::

    python3 -m venv /tmp/tfvenv
    /tmp/tfvenv/bin/pip install tensorflow-cpu==2.21.0 tf-keras==2.21.0 bert-tensorflow==1.0.4 numpy
    /tmp/tfvenv/bin/python scripts/make_google_fixture.py [--out tests/fixtures] [--reference-modeling FILE]

What runs is the ``bert`` package of bert-tensorflow 1.0.4 (Google's modeling.py, optimization.py,
tokenization.py and run_pretraining.py), in TF1 graph mode under ``tf.compat.v1``, unedited.  Only what TF 2
removed is stood in for, at run time:

* ``tensorflow.contrib.layers.layer_norm``: bert/modeling.py imports ``tensorflow.contrib``, so a stand-in module
  is registered in ``sys.modules`` while ``bert.modeling`` is imported (and removed afterwards).  Its
  ``layer_norm`` is :func:`contrib_layer_norm` below: TF 1.15's contrib function for the arguments BERT passes
  (``begin_norm_axis=-1, begin_params_axis=-1, scope=None``): a variable scope named ``LayerNorm`` (made unique
  the same way), variables ``beta`` (zeros) then ``gamma`` (ones) of the last dimension's size, and
  ``tf.nn.batch_normalization(x, *tf.nn.moments(x, [last], keep_dims=True), beta, gamma,
  variance_epsilon=1e-12)``.
* absl flags: bert/tokenization.py and bert/run_pretraining.py define flags at import; they are parsed with
  their defaults (so ``preserve_unused_tokens`` is False, Google's original behaviour).

The pretraining heads are ``bert.run_pretraining.get_masked_lm_output`` and ``get_next_sentence_output`` as
Google's ``model_fn`` calls them (the MLM decoder is the word-embedding table), and the optimizer is
``bert.optimization.create_optimizer`` (AdamWeightDecayOptimizer: ``<var>/adam_m``, ``<var>/adam_v``,
``global_step``).  The weights are the seeded TF initialisers' values, then every variable is moved by seeded
numpy noise (no bias or LayerNorm value stays exactly 0 or 1), then one training step runs, so the Adam slots and
``global_step`` are non-zero too.  The expected outputs are a forward pass of that final state on fixed inputs
(tokenised by Google's FullTokenizer) and the checkpoint is a ``tf.compat.v1.train.Saver`` save of the same
state, without the meta graph and without the ``checkpoint`` state file (Google's downloads hold neither).

bert-tensorflow 1.0.4's modeling.py computes the attention and dense layers with ``tf.einsum`` where the
modeling.py of the google-research/bert repository uses ``tf.layers.dense`` on reshaped matrices: the same
variables, the same mathematics, rounding aside.  ``--reference-modeling FILE`` loads such a repository
modeling.py (``import tensorflow as tf`` style, given a ``tf`` that is ``tf.compat.v1`` plus the contrib
stand-in), restores the written checkpoint into it and prints how far its outputs are from expected.npz.

Run twice on one machine, the script writes byte-identical files.  Another machine's CPU may round TensorFlow's
float32 kernels differently, so a rebuild elsewhere writes other bytes and numbers a rounding away (outputs within
about 1e-6): the committed files are the reference, and a rebuild replaces all of them.
"""

from __future__ import annotations

import os

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

try:
    import tensorflow as tf
except ImportError:  # pragma: no cover - the script's environment is documented above
    sys.exit("make_google_fixture.py needs TensorFlow: see the install line at the top of this file")

warnings.filterwarnings("ignore")
tf1 = tf.compat.v1
tf1.disable_v2_behavior()  # TF1 graph mode: no eager execution, TF1 variables and control flow
tf1.logging.set_verbosity(tf1.logging.ERROR)
tf.config.experimental.enable_op_determinism()

REPO = Path(__file__).resolve().parents[1]
SEED = 20181031  # the date of Google's first BERT release
LAYER_NORM_EPSILON = 1e-12  # variance_epsilon of tf.contrib.layers.layer_norm (float32)
CHECKPOINT_NAME = "bert_model.ckpt"
PAD_MULTIPLE = 8

# A tiny vocabulary laid out as Google's vocab.txt files are: [PAD] first, a block of [unused*], then [UNK],
# [CLS], [SEP], [MASK] (ids 100..103 in Google's 30522-entry vocab; 5..8 here), then single characters, whole
# words and "##" continuation pieces.  101 entries: not a multiple of 8, so the padded variant really pads.
VOCAB = [
    "[PAD]", "[unused0]", "[unused1]", "[unused2]", "[unused3]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "!", ",", "-", ".", "?",
    *"abcdefghijklmnopqrstuvwxyz",
    "the", "of", "and", "to", "in", "was", "he", "she", "it", "is", "for", "on", "with", "as", "his", "her",
    "at", "by", "from", "that", "they", "cat", "dog", "sat", "mat", "ran", "run", "park", "house", "big",
    "small", "red", "over", "under", "jumped", "quick", "brown", "fox", "lazy", "day", "night",
    "##s", "##ed", "##ing", "##ly", "##er", "##est", "##ness", "##n", "##ning", "##y", "##es",
    "##a", "##e", "##o", "##t", "##r", "##d", "##p", "##i", "##u",
]

CONFIG = {
    "attention_probs_dropout_prob": 0.1,
    "hidden_act": "gelu",
    "hidden_dropout_prob": 0.1,
    "hidden_size": 32,
    "initializer_range": 0.02,
    "intermediate_size": 64,
    "max_position_embeddings": 64,
    "num_attention_heads": 4,
    "num_hidden_layers": 2,
    "type_vocab_size": 2,
    "vocab_size": len(VOCAB),
}

SEQ_LENGTH = 16
# (text_a, text_b, next_sentence_label); mixed case, a word split into pieces, words outside the vocabulary.
PAIRS = [
    ("The quick brown fox jumped over the lazy dog.", "She was running in the park at night!", 0),
    ("Cats sat.", "Zebras ran quickly!", 1),
]
# Per row: (position, replacement); replacement None keeps the token (Google's 10% "keep" case), "[MASK]" masks
# it, any other token replaces it (the 10% "random" case).  Rows are padded with position 0, weight 0.
MASKS = [
    [(2, "[MASK]"), (5, None), (12, "cat")],
    [(1, "[MASK]"), (9, "[MASK]")],
]
MAX_PREDICTIONS = 3


# ------------------------------------------------------------------------------------------------------------
# Stand-ins for what TF 2 removed


def contrib_layer_norm(inputs, begin_norm_axis=1, begin_params_axis=-1, scope=None):
    """``tf.contrib.layers.layer_norm`` (TF 1.15) with its defaults center=True, scale=True, no activation."""
    shape = inputs.shape
    rank = shape.ndims
    if rank is None:
        raise ValueError("layer_norm needs inputs of known rank")
    begin_norm_axis %= rank
    begin_params_axis %= rank
    params_shape = shape[begin_params_axis:]
    if not params_shape.is_fully_defined():
        raise ValueError(f"layer_norm needs a fully defined parameter shape, got {params_shape}")
    with tf1.variable_scope(scope, default_name="LayerNorm", values=[inputs]):
        beta = tf1.get_variable("beta", shape=params_shape, dtype=inputs.dtype,
                                initializer=tf1.zeros_initializer(), trainable=True)
        gamma = tf1.get_variable("gamma", shape=params_shape, dtype=inputs.dtype,
                                 initializer=tf1.ones_initializer(), trainable=True)
        mean, variance = tf1.nn.moments(inputs, list(range(begin_norm_axis, rank)), keep_dims=True)
        outputs = tf1.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma,
                                             variance_epsilon=LAYER_NORM_EPSILON)
        outputs.set_shape(shape)
        return outputs


def _contrib_stand_in() -> types.ModuleType:
    contrib = types.ModuleType("tensorflow.contrib")
    layers = types.ModuleType("tensorflow.contrib.layers")
    layers.layer_norm = contrib_layer_norm
    contrib.layers = layers
    return contrib


def import_bert():
    """Google's ``bert`` package (bert-tensorflow), importable under TF 2 through the contrib stand-in."""
    contrib = _contrib_stand_in()
    added = {"tensorflow.contrib": contrib, "tensorflow.contrib.layers": contrib.layers}
    saved = {name: sys.modules.get(name) for name in added}
    sys.modules.update(added)
    try:
        from bert import modeling, optimization, run_pretraining, tokenization
    finally:
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module
    from absl import flags

    if not flags.FLAGS.is_parsed():
        flags.FLAGS([sys.argv[0]])  # every flag at its default
    return modeling, optimization, run_pretraining, tokenization


def load_reference_modeling(path: Path):
    """A google-research/bert style modeling.py (``import tensorflow as tf``), given ``tf.compat.v1`` + contrib."""
    spec = importlib.util.spec_from_file_location("reference_bert_modeling", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    class _TF1(types.ModuleType):
        def __getattr__(self, name):
            return getattr(tf1, name)

    shim = _TF1("tf1_with_contrib")
    shim.contrib = _contrib_stand_in()
    module.tf = shim
    return module


# ------------------------------------------------------------------------------------------------------------
# Inputs


def _truncate_pair(tokens_a: list[str], tokens_b: list[str], max_length: int) -> None:
    """Drop tokens from the end of the longer side until the pair fits, as Google's scripts do."""
    while len(tokens_a) + len(tokens_b) > max_length:
        (tokens_a if len(tokens_a) > len(tokens_b) else tokens_b).pop()


def make_inputs(tokenization, vocab_file: Path) -> dict[str, np.ndarray]:
    tokenizer = tokenization.FullTokenizer(vocab_file=str(vocab_file), do_lower_case=True)
    rows: dict[str, list] = {k: [] for k in ("input_ids", "input_mask", "token_type_ids", "tokens",
                                             "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
                                             "next_sentence_labels", "text_a", "text_b")}
    for (text_a, text_b, label), masks in zip(PAIRS, MASKS):
        tokens_a, tokens_b = tokenizer.tokenize(text_a), tokenizer.tokenize(text_b)
        _truncate_pair(tokens_a, tokens_b, SEQ_LENGTH - 3)
        tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
        segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        ids = tokenizer.convert_tokens_to_ids(tokens)
        original = list(ids)
        positions, labels, weights = [], [], []
        for position, replacement in masks:
            assert 0 < position < len(tokens) and tokens[position] not in ("[CLS]", "[SEP]"), (position, tokens)
            if replacement is not None:
                ids[position] = tokenizer.convert_tokens_to_ids([replacement])[0]
            positions.append(position)
            labels.append(original[position])
            weights.append(1.0)
        while len(positions) < MAX_PREDICTIONS:
            positions.append(0)
            labels.append(0)
            weights.append(0.0)
        mask = [1] * len(ids)
        padding = SEQ_LENGTH - len(ids)
        rows["input_ids"].append(ids + [0] * padding)
        rows["input_mask"].append(mask + [0] * padding)
        rows["token_type_ids"].append(segments + [0] * padding)
        rows["tokens"].append(tokens + [""] * padding)
        rows["masked_lm_positions"].append(positions)
        rows["masked_lm_ids"].append(labels)
        rows["masked_lm_weights"].append(weights)
        rows["next_sentence_labels"].append([label])
        rows["text_a"].append(text_a)
        rows["text_b"].append(text_b)
    out = {}
    for key, value in rows.items():
        if key in ("tokens", "text_a", "text_b"):
            out[key] = np.array(value, dtype=np.str_)
        elif key == "masked_lm_weights":
            out[key] = np.array(value, dtype=np.float32)
        else:
            out[key] = np.array(value, dtype=np.int32)
    assert out["input_mask"].all(axis=1).tolist() == [True, False], "row 0 full, row 1 padded"
    assert set(np.unique(out["token_type_ids"][out["input_mask"] == 1])) == {0, 1}
    return out


# ------------------------------------------------------------------------------------------------------------
# Graphs


OUTPUT_KEYS = ("embedding_output", "all_encoder_layers", "sequence_output", "pooled_output", "mlm_logits",
               "mlm_log_probs", "masked_lm_example_loss", "masked_lm_loss", "nsp_logits", "nsp_log_probs",
               "next_sentence_example_loss", "next_sentence_loss", "total_loss")


def _logits_of(log_probs):
    """The logits a head passed to ``tf.nn.log_softmax`` (the heads return only the log-probabilities)."""
    assert log_probs.op.type == "LogSoftmax", log_probs.op.type
    return log_probs.op.inputs[0]


def build(modeling, run_pretraining, config: dict, inputs: dict[str, np.ndarray], *, optimizer=None):
    """BertModel(is_training=False) and the pretraining heads, as Google's run_pretraining ``model_fn`` builds
    them; with ``optimizer`` (bert.optimization), also its train op.  Returns (outputs, train_op)."""
    tf1.set_random_seed(SEED)  # the graph-level seed: the initialisers draw the same values every run
    bert_config = modeling.BertConfig.from_dict(config)
    model = modeling.BertModel(
        config=bert_config, is_training=False,
        input_ids=tf1.constant(inputs["input_ids"]), input_mask=tf1.constant(inputs["input_mask"]),
        token_type_ids=tf1.constant(inputs["token_type_ids"]), use_one_hot_embeddings=False)
    saved_modeling = run_pretraining.modeling
    run_pretraining.modeling = modeling  # the heads use the same modeling module as the encoder
    try:
        mlm_loss, mlm_example_loss, mlm_log_probs = run_pretraining.get_masked_lm_output(
            bert_config, model.get_sequence_output(), model.get_embedding_table(),
            tf1.constant(inputs["masked_lm_positions"]), tf1.constant(inputs["masked_lm_ids"]),
            tf1.constant(inputs["masked_lm_weights"]))
        nsp_loss, nsp_example_loss, nsp_log_probs = run_pretraining.get_next_sentence_output(
            bert_config, model.get_pooled_output(), tf1.constant(inputs["next_sentence_labels"]))
    finally:
        run_pretraining.modeling = saved_modeling
    total_loss = mlm_loss + nsp_loss
    outputs = {
        "embedding_output": model.get_embedding_output(),
        "all_encoder_layers": tf1.stack(model.get_all_encoder_layers()),
        "sequence_output": model.get_sequence_output(),
        "pooled_output": model.get_pooled_output(),
        "mlm_logits": _logits_of(mlm_log_probs),
        "mlm_log_probs": mlm_log_probs,
        "masked_lm_example_loss": mlm_example_loss,
        "masked_lm_loss": mlm_loss,
        "nsp_logits": _logits_of(nsp_log_probs),
        "nsp_log_probs": nsp_log_probs,
        "next_sentence_example_loss": nsp_example_loss,
        "next_sentence_loss": nsp_loss,
        "total_loss": total_loss,
    }
    train_op = None
    if optimizer is not None:
        train_op = optimizer.create_optimizer(total_loss, init_lr=1e-3, num_train_steps=10, num_warmup_steps=0,
                                              use_tpu=False)
    return outputs, train_op


def _sess_config():
    return tf1.ConfigProto(intra_op_parallelism_threads=1, inter_op_parallelism_threads=1,
                           device_count={"GPU": 0})


def _name(variable) -> str:
    return variable.name.split(":")[0]


def _perturbation(name: str, shape, rng: np.random.Generator) -> np.ndarray:
    """Seeded noise: small for matrices, larger for biases and LayerNorm (so none stays at 0 or 1)."""
    scale = 0.1 if len(shape) == 1 else 0.02
    noise = rng.normal(0.0, scale, size=shape).astype(np.float32)
    if len(shape) == 1:  # keep every element clearly away from its initial value
        noise += np.where(noise >= 0, 0.01, -0.01).astype(np.float32)
    return noise


def _load(sess, variables, values: dict[str, np.ndarray]) -> None:
    for variable in variables:
        variable.load(values[_name(variable)], sess)


def _save(sess, folder: Path) -> None:
    saver = tf1.train.Saver(save_relative_paths=True)
    saver.save(sess, str(folder / CHECKPOINT_NAME), write_meta_graph=False)
    state = folder / "checkpoint"
    if state.exists():
        state.unlink()


def _write_text_files(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob(CHECKPOINT_NAME + ".*"):
        stale.unlink()
    (folder / "vocab.txt").write_text("".join(token + "\n" for token in VOCAB), encoding="utf-8")
    (folder / "bert_config.json").write_text(json.dumps(CONFIG, indent=2, sort_keys=True) + "\n",
                                             encoding="utf-8")


def make_original(bert, folder: Path) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The Google-format fixture: returns (every variable's saved value, expected.npz contents)."""
    modeling, optimization, run_pretraining, tokenization = bert
    _write_text_files(folder)
    inputs = make_inputs(tokenization, folder / "vocab.txt")
    graph = tf1.Graph()
    with graph.as_default():
        outputs, train_op = build(modeling, run_pretraining, CONFIG, inputs, optimizer=optimization)
        trainable = tf1.trainable_variables()
        with tf1.Session(graph=graph, config=_sess_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            rng = np.random.default_rng(SEED)
            for variable in sorted(trainable, key=_name):
                value = sess.run(variable)
                variable.load(value + _perturbation(_name(variable), value.shape, rng), sess)
            sess.run(train_op)
            result = sess.run(outputs)
            values = {_name(v): sess.run(v) for v in tf1.global_variables()}
            _save(sess, folder)
    expected = {**inputs, **{key: np.asarray(result[key], dtype=np.float32) for key in OUTPUT_KEYS}}
    np.savez(folder / "expected.npz", **expected)
    return values, expected


def _padded_rows(name: str) -> bool:
    return name in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias") or any(
        name == base + slot for base in ("bert/embeddings/word_embeddings", "cls/predictions/output_bias")
        for slot in ("/adam_m", "/adam_v"))


def make_padded(bert, folder: Path, values: dict[str, np.ndarray], expected: dict[str, np.ndarray]) -> None:
    """The NVIDIA-style fixture: the same weights, vocabulary rows padded to a multiple of PAD_MULTIPLE."""
    modeling, optimization, run_pretraining, _ = bert
    vocab_size = CONFIG["vocab_size"]
    padded_size = -(-vocab_size // PAD_MULTIPLE) * PAD_MULTIPLE
    assert padded_size > vocab_size
    _write_text_files(folder)  # bert_config.json keeps the real vocab_size, as NVIDIA's files do
    rng = np.random.default_rng(SEED + 1)
    padded = {}
    for name, value in values.items():
        if _padded_rows(name):
            extra = padded_size - value.shape[0]
            if name.endswith(("/adam_m", "/adam_v")):
                rows = np.zeros((extra, *value.shape[1:]), np.float32)
            else:  # non-zero rows, so a reader that keeps them cannot go unnoticed
                rows = rng.normal(0.0, 0.02, size=(extra, *value.shape[1:])).astype(np.float32)
            value = np.concatenate([value, rows], axis=0)
        padded[name] = value
    inputs = {k: expected[k] for k in ("input_ids", "input_mask", "token_type_ids", "masked_lm_positions",
                                        "masked_lm_ids", "masked_lm_weights", "next_sentence_labels")}
    graph = tf1.Graph()
    with graph.as_default():
        outputs, _ = build(modeling, run_pretraining, {**CONFIG, "vocab_size": padded_size}, inputs,
                           optimizer=optimization)
        variables = tf1.global_variables()
        assert sorted(_name(v) for v in variables) == sorted(padded), "the padded graph has other variables"
        with tf1.Session(graph=graph, config=_sess_config()) as sess:
            sess.run(tf1.global_variables_initializer())
            _load(sess, variables, padded)
            result = sess.run(outputs)
            _save(sess, folder)
    # The real rows compute what the unpadded model computes.
    for key in ("embedding_output", "all_encoder_layers", "sequence_output", "pooled_output", "nsp_logits"):
        np.testing.assert_allclose(result[key], expected[key], rtol=0, atol=1e-6, err_msg=key)
    np.testing.assert_allclose(result["mlm_logits"][:, :vocab_size], expected["mlm_logits"], rtol=0, atol=1e-6)
    print(f"padded: {vocab_size} -> {padded_size} rows; the real rows reproduce expected.npz")


def check_reference(bert, reference_path: Path, folder: Path, expected: dict[str, np.ndarray]) -> None:
    """Restore the written checkpoint into another modeling.py and report its distance from expected.npz."""
    _, _, run_pretraining, _ = bert
    reference = load_reference_modeling(reference_path)
    graph = tf1.Graph()
    with graph.as_default():
        outputs, _ = build(reference, run_pretraining, CONFIG, expected)
        saver = tf1.train.Saver(var_list=tf1.global_variables())
        with tf1.Session(graph=graph, config=_sess_config()) as sess:
            saver.restore(sess, str(folder / CHECKPOINT_NAME))
            result = sess.run(outputs)
    print(f"reference modeling {reference_path}: max |difference| from expected.npz")
    for key in OUTPUT_KEYS:
        print(f"  {key:28s} {float(np.max(np.abs(result[key] - expected[key]))):.3e}")


def check_values(values: dict[str, np.ndarray]) -> None:
    for name, value in values.items():
        if name.endswith(("/bias", "/beta", "output_bias")):
            assert not (value == 0).any(), name
        if name.endswith("/gamma"):
            assert not (value == 1).any(), name
        if name.endswith(("/adam_m", "/adam_v")):
            assert (value != 0).any(), name
    assert values["global_step"] == 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures",
                        help="folder that receives google_bert_tiny/ and google_bert_tiny_padded/")
    parser.add_argument("--reference-modeling", type=Path, default=None,
                        help="a google-research/bert modeling.py to cross-check the written checkpoint with")
    args = parser.parse_args(argv)
    assert len(VOCAB) == len(set(VOCAB)) and len(VOCAB) % PAD_MULTIPLE
    bert = import_bert()
    original = args.out / "google_bert_tiny"
    values, expected = make_original(bert, original)
    check_values(values)
    make_padded(bert, args.out / "google_bert_tiny_padded", values, expected)
    if args.reference_modeling is not None:
        check_reference(bert, args.reference_modeling, original, expected)
    for folder in (original, args.out / "google_bert_tiny_padded"):
        size = sum(f.stat().st_size for f in folder.iterdir())
        print(f"{folder}: {', '.join(sorted(f.name for f in folder.iterdir()))} ({size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
