"""transformers pipelines on hfbert folders (tiny, untrained models: agreement, not quality, is tested here;
the recipes' tests compare pipelines with trained models' evaluations)."""

import pytest
import torch
from transformers import pipeline
from transformers.pipelines import PIPELINE_REGISTRY

import hfbert
from hfbert.tasks import encode_sentences, register_pipelines
from hfbert.tasks.pipelines import ExtractiveQuestionAnsweringPipeline
from hfbert.tokenization import bert_tokenizer_from_vocab

WORDS = ["the", "cat", "sat", "on", "mat", "who", "where", "is", "a", "dog", "ran", "in", "park", "?", ".", "##s"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    (d / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n")
    return bert_tokenizer_from_vocab(d / "vocab.txt")


def _save(model_cls, tokenizer, path, **config):
    torch.manual_seed(0)
    cfg = hfbert.HfBertConfig.from_preset("tiny", hidden_size=32, num_attention_heads=4, intermediate_size=37,
                                          vocab_size=len(tokenizer), **config)
    model = model_cls(cfg).eval()
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return model


def test_fill_mask_matches_the_model_argmax(tokenizer, tmp_path):
    model = _save(hfbert.HfBertForMaskedLM, tokenizer, tmp_path)
    pipe = pipeline("fill-mask", model=str(tmp_path), device="cpu")
    text = "the cat [MASK] on the mat ."
    enc = tokenizer(text, return_tensors="pt")
    with torch.no_grad():
        logits = model(**enc).logits[0]
    mask_at = enc["input_ids"][0].tolist().index(tokenizer.mask_token_id)
    top = pipe(text, top_k=3)
    assert [t["token"] for t in top] == logits[mask_at].topk(3).indices.tolist()
    assert top[0]["score"] == pytest.approx(logits[mask_at].softmax(-1).max().item(), rel=1e-5)


def test_feature_extraction_matches_the_base_model_and_mean_pooling(tokenizer, tmp_path):
    model = _save(hfbert.HfBertModel, tokenizer, tmp_path)
    pipe = pipeline("feature-extraction", model=str(tmp_path), device="cpu")
    text = "a dog ran in the park"
    features = torch.tensor(pipe(text))[0]  # (T, D)
    with torch.no_grad():
        expected = model(**tokenizer(text, return_tensors="pt")).last_hidden_state[0]
    assert torch.allclose(features, expected, atol=1e-5)
    pooled = encode_sentences(model, tokenizer, [text, "the cat sat"], strategy="mean")
    assert torch.allclose(pooled[0], features[1:-1].mean(0), atol=1e-5)  # [CLS] and [SEP] excluded
    assert torch.allclose(encode_sentences(model, tokenizer, [text], strategy="cls")[0], features[0], atol=1e-5)
    with pytest.raises(ValueError, match="longer than max_length=4"):
        encode_sentences(model, tokenizer, [text], max_length=4)


def test_text_and_token_classification_pipelines_load_hfbert_heads(tokenizer, tmp_path):
    labels = {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}
    model = _save(hfbert.HfBertForSequenceClassification, tokenizer, tmp_path / "cls", **labels)
    out = pipeline("text-classification", model=str(tmp_path / "cls"), device="cpu")("the cat sat")
    with torch.no_grad():
        probs = model(**tokenizer("the cat sat", return_tensors="pt")).logits.softmax(-1)[0]
    assert out[0]["label"] == ["neg", "pos"][int(probs.argmax())]
    assert out[0]["score"] == pytest.approx(probs.max().item(), rel=1e-5)
    ner = {"id2label": {0: "O", 1: "B-LOC"}, "label2id": {"O": 0, "B-LOC": 1}}
    model = _save(hfbert.HfBertForTokenClassification, tokenizer, tmp_path / "tok", **ner)
    tokens = pipeline("token-classification", model=str(tmp_path / "tok"), device="cpu", ignore_labels=[])("a dog ran")
    with torch.no_grad():
        logits = model(**tokenizer("a dog ran", return_tensors="pt")).logits[0, 1:-1]
    assert [t["entity"] for t in tokens] == [["O", "B-LOC"][i] for i in logits.argmax(-1).tolist()]


def test_question_answering_is_registered_and_decodes_legal_spans(tokenizer, tmp_path):
    register_pipelines()
    register_pipelines()  # idempotent
    assert PIPELINE_REGISTRY.supported_tasks["question-answering"]["impl"] is ExtractiveQuestionAnsweringPipeline
    _save(hfbert.HfBertForQuestionAnswering, tokenizer, tmp_path)
    context = " ".join(["the cat sat on the mat ."] * 12)  # longer than one 32-token window
    for task in ("question-answering", "extractive-question-answering"):
        qa = pipeline(task, model=str(tmp_path), device="cpu")
        answers = qa(question="where is the cat ?", context=context, max_seq_len=32, doc_stride=8, top_k=3)
        assert len(answers) == 3
        for a in answers:
            assert a["answer"] == context[a["start"]:a["end"]] and a["answer"]
            assert len(tokenizer.tokenize(a["answer"])) <= 30
        assert answers[0]["score"] >= answers[1]["score"]
    batch = qa(question=["who sat ?", "where ?"], context=["the cat sat", "in the park"])
    assert len(batch) == 2 and all(isinstance(b, dict) for b in batch)
    with pytest.raises(ValueError, match="question= and context="):
        qa(question="who?")
    with pytest.raises(ValueError, match="must not be empty"):
        qa(question="who ?", context="  ")
