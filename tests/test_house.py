"""The house rules that no single module owns: the package works installed from a wheel, every command's settings
and errors follow one system, the card templates ship inside the package, and the product speaks only of itself."""

import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

import hfbert.metrics
from hfbert import cli
from hfbert.arguments import CommandParser, UsageError, run_command
from hfbert.modelcard import TEMPLATE_DIR, render_model_card, template_path
from hfbert.pretrain.config import PretrainConfig

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "hfbert"
BENCHMARKS = REPO / "benchmarks"  # what measures the package, beside it and outside the wheel


# ----------------------------------------------------------------------------------------------------------------
# The product speaks of itself: no issue numbers, no history of the work, no workspace paths

SCANNED = ("hfbert", "recipes", "benchmarks", "docs", "README.md")
FORBIDDEN = {
    "an issue number": r"\bissues?\s*#?\d+",
    "the issue's goals": r"\bthe issue'?s\b",
    "a specification seed": r"\bseeds?/|\bseeds? 0\d\d\b",
    "a workspace path": r"\.\./shared|\bshared/data\b|/work/",
    "a work session": r"(?<!python )(?<!http )(?<!\.)\bsessions?\b",  # a Python or HTTP session is fine
    "the history of the work": r"\b(?:before|after) the fix\b|\b(?:last|previous|earlier) (?:session|round)\b",
    "goals of the work": r"\btargets? (?:is |are |was |were )?(?:not )?met\b|^#+\s*targets\b|\|\s*target\s*\|.*\bmet\b",
}
# Code comments do not quote one machine's timings; docs do, with the command that made them.
FORBIDDEN_IN_CODE = {"one machine's timings": r"\b\d+-core\b|\bour (?:[\w-]+ )?(?:machine|box|cpu)\b"}


def _text_files(*roots: str):
    for root in roots:
        path = REPO / root
        for file in sorted([path] if path.is_file() else path.rglob("*")):
            if not file.is_file() or "__pycache__" in file.parts:
                continue
            data = file.read_bytes()
            if b"\0" in data[:8192]:
                continue  # binary (a figure, a compressed corpus)
            try:
                yield file, data.decode("utf-8")
            except UnicodeDecodeError:
                continue


def _hits(files, patterns: dict[str, str]) -> list[str]:
    found = []
    for file, text in files:
        for number, line in enumerate(text.splitlines(), 1):
            for what, pattern in patterns.items():
                if re.search(pattern, line, flags=re.IGNORECASE):
                    found.append(f"{file.relative_to(REPO)}:{number}: {what}: {line.strip()[:120]}")
    return found


def test_the_product_speaks_only_of_itself():
    hits = _hits(_text_files(*SCANNED), FORBIDDEN)
    assert not hits, "words about the work rather than the product:\n" + "\n".join(hits)


def test_code_comments_quote_no_machine_timings():
    code = [(f, t) for f, t in _text_files("hfbert", "recipes", "benchmarks") if f.suffix == ".py"]
    hits = _hits(code, FORBIDDEN_IN_CODE)
    assert not hits, "timings of one machine belong in docs/:\n" + "\n".join(hits)


def test_the_scan_finds_what_it_forbids(tmp_path):
    samples = ["see issue 8", "issue #12", "the issue's targets", "spec in seeds/000", "seed 002, section 3",
               "../shared/data/x.txt", "the last session", "before the fix", "| target | value | goal | met |",
               "## Targets"]
    for sample in samples:
        assert _hits([(REPO / "x", sample)], FORBIDDEN), sample
    clean = ["target length", "labels are the targets of the loss", "seed 42", "random seed", "the issue tracker",
             "once per Python session", "requests.Session()"]
    assert not _hits([(REPO / "x", "\n".join(clean))], FORBIDDEN)
    assert _hits([(REPO / "x", "# 1.5x faster on our 2-core machine")], FORBIDDEN_IN_CODE)


MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _headings(page: Path) -> set[str]:
    """The anchors GitHub gives a page's headings (lower case, punctuation dropped, spaces to hyphens)."""
    return {re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            for m in re.finditer(r"^#+\s+(.*)$", page.read_text(encoding="utf-8"), flags=re.M)}


def test_every_link_of_the_docs_reaches_a_file_and_a_heading():
    broken = []
    pages = [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / "benchmarks").rglob("*.md"))]
    for page in pages:
        text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)  # code blocks hold no links
        for target in MARKDOWN_LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            path, _, heading = target.partition("#")
            dest = (page.parent / path) if path else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target}: no such file")
            elif heading and dest.suffix == ".md" and heading not in _headings(dest):
                broken.append(f"{page.relative_to(REPO)}: {target}: no such heading")
    assert not broken, "broken links:\n" + "\n".join(broken)


# ----------------------------------------------------------------------------------------------------------------
# The package stands alone


def _levels_up(match: re.Match) -> int:
    """How many folders above the file's own folder ``Path(__file__)...`` climbs."""
    levels = 0
    for step in re.findall(r"\.parents\[(\d+)\]|(\.parent)\b", match.group(0)):
        levels += int(step[0]) + 1 if step[0] else 1
    return levels - 1  # Path(__file__).parent is the file's own folder


def test_no_path_leaves_the_package():
    climbs = re.compile(r"Path\(__file__\)(?:\.resolve\(\)|\.absolute\(\))?(?:\.parents\[\d+\]|\.parent\b)+")
    leaving = []
    for file in PACKAGE.rglob("*.py"):
        depth = len(file.relative_to(PACKAGE).parts) - 1  # folders between hfbert/ and the file
        for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
            for match in climbs.finditer(line):
                if _levels_up(match) > depth:
                    leaving.append(f"{file.relative_to(REPO)}:{number}: {line.strip()}")
    assert not leaving, "paths above the package:\n" + "\n".join(leaving)
    links = [str(p.relative_to(REPO)) for p in PACKAGE.rglob("*") if p.is_symlink()]
    assert not links, f"symbolic links in the package (a wheel does not keep them): {links}"


# ----------------------------------------------------------------------------------------------------------------
# The package's shape: no import cycle, no private name across modules, no file too long to read

MAX_LINES = 700
# The model file reads like the paper, top to bottom, and travels to the Hub as one remote-code file, as
# transformers' own modeling files do; it is the one file allowed past MAX_LINES.
LONG_BY_DESIGN = {"modeling_hfbert.py"}


def _modules(package: Path) -> dict[str, Path]:
    """The dotted name of every module under ``package`` (a package is its ``__init__``)."""
    modules = {}
    for path in package.rglob("*.py"):
        parts = (package.name, *path.relative_to(package).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _package_imports(package: Path = PACKAGE) -> tuple[dict[str, set[str]], list[str]]:
    """Each module's imports of other modules of ``package`` wherever they stand (at the top, inside a function, an
    ``if`` or a ``try``; ``import hfbert.x``, ``from . import x``, ``from .x import y``), and every private name one
    module imports from another (``from .x import _y``)."""
    import ast

    modules = _modules(package)

    def module_of(dotted: str) -> str | None:  # the longest prefix that is a module (a folder without __init__ is not)
        parts = dotted.split(".")
        return next((".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in modules), None)

    graph, private = {}, []
    for name, path in modules.items():
        here = (name if path.name == "__init__.py" else name.rpartition(".")[0]).split(".")
        graph[name] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*here[: len(here) - node.level + 1], *[node.module or ""]]) if node.level \
                    else node.module
                base = base.rstrip(".")
                imported = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
                private += [f"{name} imports {base}.{alias.name}" for alias in node.names
                            if f"{base}.{alias.name}" not in modules and alias.name.startswith("_")
                            and not alias.name.startswith("__") and base.partition(".")[0] == package.name]
            else:
                continue
            graph[name] |= {m for dotted in imported if (m := module_of(dotted)) and m != name}
    return graph, private


def _import_cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every import cycle, at every depth: between modules, and between the packages that hold them (a module of
    ``a`` importing ``b`` while a module of ``b`` imports ``a`` is a cycle too, whatever modules it goes through).
    A module may import the packages above it (Python runs their ``__init__`` first anyway)."""
    cycles = set()
    for depth in range(1, max(name.count(".") for name in graph) + 1):
        def unit(module: str) -> str:
            return ".".join(module.split(".")[: depth + 1])

        units: dict[str, set[str]] = {}
        for module, imports in graph.items():
            units.setdefault(unit(module), set()).update(
                unit(imported) for imported in imports if not (unit(module) + ".").startswith(unit(imported) + "."))
        done, path = set(), []

        def visit(node: str) -> None:  # depth first: a node met again on the current path closes a cycle
            if node in path:
                cycle = path[path.index(node):]
                first = cycle.index(min(cycle))  # one spelling per cycle, whichever node the search met first
                cycles.add(" -> ".join([*cycle[first:], *cycle[:first], cycle[first]]))
                return
            if node in done:
                return
            path.append(node)
            for imported in sorted(units.get(node, ())):
                visit(imported)
            path.pop()
            done.add(node)

        for node in sorted(units):
            visit(node)
    return sorted(cycles)


def test_the_package_has_no_import_cycle_and_no_private_name_across_modules():
    graph, private = _package_imports()
    assert not private, private
    cycles = _import_cycles(graph)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


# The package's layers, lowest first: a module imports from its own layer or a lower one, never a higher one.
LAYERS = [
    # the model: the files that travel to the Hub as remote code, importing only each other
    {"configuration_hfbert", "heads_hfbert", "unpadding_hfbert", "modeling_hfbert"},
    # foundations: settings and errors, the command-line parser, tokenizer and optimizer pieces, metrics, cards
    {"settings", "arguments", "inputs", "wordpiece", "optim_names", "optim", "tf_checkpoint", "hub_deadlines", "metrics",
     "modelcard", "tokenizer_settings", "convert_settings"},
    # models and tokenizers from anywhere: the Hub, conversion, Auto registration, vocabularies
    {"tokenization", "google_checkpoint", "auto", "hub", "convert", "model_source", "vocabulary", ""},
    # the data pipeline, and fine-tuning tasks with their recipes
    {"data", "tasks", "recipes"},
    # downstream evaluation, then pretraining (which evaluates as it trains)
    {"evaluation"},
    {"pretrain"},
    # bit-error robustness: the fault injector and `hfbert robustness`
    {"faults", "robustness_settings", "robustness"},
    # the command line's dispatcher
    {"cli"},
]


def _layer(module: str) -> int:
    unit = module.split(".")[1] if "." in module else ""
    return next(number for number, layer in enumerate(LAYERS) if unit in layer)


def test_no_module_imports_from_a_higher_layer():
    graph, _ = _package_imports()
    units = {m.split(".")[1] if "." in m else "" for m in graph}
    assert units == set().union(*LAYERS), "a new module or package: give it a layer"
    upward = [f"{module} -> {target}" for module, targets in sorted(graph.items()) for target in sorted(targets)
              if _layer(target) > _layer(module)]
    assert not upward, "imports from a higher layer:\n" + "\n".join(upward)
    remote = {f"hfbert.{name}" for name in LAYERS[0]}
    assert all(graph[module] <= remote for module in remote), "the remote-code files import only each other"


# The tests: each test module stands alone. What two modules share lives in a conftest.py (fixtures) or in
# tests/helpers/ (plain code), never in another test module, whose import would also run that module's fixtures.

TEST_SUITES = (REPO / "tests", BENCHMARKS / "tests")
_IMPORT = re.compile(r"^\s*(?:from\s+([\w.]+)\s+)?import\s+([^#]*)")  # the module, then what a line imports


def _test_module_imports(*roots: Path) -> list[str]:
    """Every line of a .py file under ``roots`` that imports a test module (``test_*``) or a conftest, in code or in
    the source of a script a test runs in a subprocess."""
    found = []
    for root in roots:
        for file in sorted(root.rglob("*.py")):
            for number, line in enumerate(file.read_text(encoding="utf-8").splitlines(), 1):
                match = _IMPORT.match(line)
                if not match:
                    continue
                imported = re.sub(r"\bas\s+\w+", "", match[2])  # the names bound, not what they are called
                names = re.findall(r"[\w.]+", f"{match[1] or ''} {imported}")
                if any(part.startswith("test_") or part == "conftest" for n in names for part in n.split(".")):
                    found.append(f"{file.relative_to(root.parent)}:{number}: {line.strip()}")
    return found


def test_no_test_module_imports_another():
    imports = _test_module_imports(*TEST_SUITES)
    assert not imports, "fixtures go to a conftest.py, shared code to tests/helpers/:\n" + "\n".join(imports)


PLANTED_IMPORTS = {
    "from a module": "from test_pretrain import corpus, settings  # noqa: F401\n",
    "a module": "import test_pretrain\n",
    "one of several": "import json, test_pretrain as pretraining\n",
    "from a folder": "from pretrain.test_pretrain import settings\n",
    "inside a function": "def run():\n    from tests.pretrain import test_pretrain\n",
    "in a subprocess's script": 'SCRIPT = """\n    import fsspec, test_data_remote\n"""\n',
    "a conftest": "from conftest import corpus\n",
}


@pytest.mark.parametrize("where", PLANTED_IMPORTS)
def test_the_test_import_scan_finds_a_planted_import(tmp_path, where):
    tests = tmp_path / "tests"
    (tests / "pretrain").mkdir(parents=True)
    (tests / "pretrain" / "test_clean.py").write_text(
        "import json\nimport pytest\nimport helpers.flaky_filesystem\nfrom helpers.pretraining import settings\n",
        encoding="utf-8")
    assert _test_module_imports(tests) == []
    (tests / "pretrain" / "test_planted.py").write_text(PLANTED_IMPORTS[where], encoding="utf-8")
    assert [hit.split(":")[0] for hit in _test_module_imports(tests)] == ["tests/pretrain/test_planted.py"], where


# Cycles planted in a copy of the package, in each form an import takes: (file, code appended, what it ties).
MODULES = ("hfbert.hub", "hfbert.model_source")
PLANTED_CYCLES = {
    "inside a function": ("hub.py", "def _planted():\n    from .model_source import locate\n", MODULES),
    "inside a try": ("hub.py", "try:\n    import hfbert.model_source\nexcept ImportError:\n    pass\n", MODULES),
    "inside an if": ("hub.py", "if __name__ == '__main__':\n    from . import model_source\n", MODULES),
    "between packages": ("metrics/squad_scoring.py", "def _planted():\n    from ..tasks.qa import best_spans\n",
                         ("hfbert.metrics", "hfbert.tasks")),
}


@pytest.mark.slow
@pytest.mark.parametrize("where", PLANTED_CYCLES)
def test_the_cycle_check_finds_a_cycle_planted_in_a_copy_of_the_package(tmp_path, where):
    file, planted, tied = PLANTED_CYCLES[where]
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=lambda folder, names: [
        n for n in names if n == "__pycache__" or not (n.endswith(".py") or Path(folder, n).is_dir())])

    def tying(cycles):
        return [cycle for cycle in cycles if set(tied) <= set(cycle.split(" -> "))]

    assert not tying(_import_cycles(_package_imports(copy)[0]))
    with (copy / file).open("a", encoding="utf-8") as module:
        module.write("\n\n" + planted)
    assert tying(_import_cycles(_package_imports(copy)[0])), where


def test_no_package_file_is_too_long_to_read():
    long = {str(p.relative_to(REPO)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES and p.name not in LONG_BY_DESIGN}
    assert not long, long


def test_card_templates_ship_in_the_package():
    assert TEMPLATE_DIR.is_dir() and not TEMPLATE_DIR.is_symlink() and TEMPLATE_DIR.parent == PACKAGE
    assert {p.name for p in TEMPLATE_DIR.glob("*.md")} == {"finetuned.md", "pretrained.md"}
    assert template_path("finetuned.md") == TEMPLATE_DIR / "finetuned.md"
    with pytest.raises(FileNotFoundError, match="packaged templates: finetuned.md, pretrained.md"):
        template_path("missing.md")


# What a setting's field may say of it (hfbert.settings.setting); the lists the code uses are read from these marks.
SETTING_MARKS = {"help", "aliases", "recorded", "neutral", "resumable", "recoverable", "card", "architecture", "job",
                 "dataset_card", "folder"}


def test_each_setting_is_declared_once_with_what_the_code_needs_to_know_of_it():
    from hfbert.data.settings import ExampleSettings
    from hfbert.pretrain.config import CARD_SETTINGS, RECOVERY_CHANGES, RESUMABLE_CHANGES, TRAJECTORY_NEUTRAL
    from hfbert.tasks.recipe import ModelArguments

    for settings in (PretrainConfig, ExampleSettings, ModelArguments):
        for f in dataclasses.fields(settings):
            assert f.metadata.get("help"), f"{settings.__name__}.{f.name} has no --help text"
            assert set(f.metadata) <= SETTING_MARKS, f"{settings.__name__}.{f.name}: {set(f.metadata)}"
    names = {f.name for f in dataclasses.fields(PretrainConfig)}
    assert {"learning_rate", "seed", "masked_lm_prob"} <= set(CARD_SETTINGS) <= names
    assert {"output_dir", "logging_steps"} <= TRAJECTORY_NEUTRAL < RESUMABLE_CHANGES <= names
    # A recovery changes the trajectory, so none of its settings is neutral; the model and the data never change.
    assert "learning_rate" in RECOVERY_CHANGES and not RECOVERY_CHANGES & TRAJECTORY_NEUTRAL
    assert not RECOVERY_CHANGES & {"preset", "model", "max_seq_length", "seed", "input", "prepared"}
    # The field helper is defined once, and no module spells a list of setting names of its own.
    helpers = [p for p in PACKAGE.rglob("*.py") if re.search(r"^def _?setting\(", p.read_text(), re.M)]
    assert [p.relative_to(PACKAGE).as_posix() for p in helpers] == ["settings.py"]


def _setting_lists(path: Path, names: set[str], root: Path = REPO) -> list[str]:
    """Where a module spells a collection (tuple, list, set, dict keys) of two or more setting names and nothing else."""
    import ast

    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [key for key in node.keys if key is not None]
        else:
            continue
        spelled = [item.value for item in items if isinstance(item, ast.Constant) and item.value in names]
        if len(spelled) >= 2 and len(spelled) == len(items):
            found.append(f"{path.relative_to(root)}:{node.lineno}: {spelled}")
    return found


def test_no_module_lists_setting_names_of_another_modules_settings(tmp_path):
    """A setting's name is written in its field; what the code must know of it is a mark there. Only the module
    that declares the settings may spell several of their names together (its checks); any other module reads the
    marks, so adding a setting touches its field, a test and the docs."""
    from hfbert.data.settings import ExampleSettings
    from hfbert.tasks.recipe import ModelArguments

    declared = {}
    for settings in (PretrainConfig, ExampleSettings, ModelArguments):
        home = Path(sys.modules[settings.__module__].__file__).resolve()
        for f in dataclasses.fields(settings):
            declared.setdefault(f.name, set()).add(home)
    # "model" and "dataset" are also the Hub's two repository types (hub.REPO_TYPES), not the settings.
    names = set(declared) - {"model", "dataset"}
    homes = set().union(*declared.values())
    lists = [hit for path in PACKAGE.rglob("*.py") if path.resolve() not in homes for hit in _setting_lists(path, names)]
    assert not lists, "setting names spelled outside their fields:\n" + "\n".join(lists)
    planted = tmp_path / "planted.py"  # the scan finds what it forbids
    planted.write_text('SCHEDULE = ("learning_rate", "warmup_ratio")\n')
    assert _setting_lists(planted, names, root=tmp_path) == ["planted.py:1: ['learning_rate', 'warmup_ratio']"]


def test_the_heads_are_listed_once():
    """hfbert.heads_hfbert.HEADS feeds the model file's auto_map and names, the package's names, the Auto
    registration and hfbert convert; no other module lists them."""
    from hfbert.convert_settings import HEADS as CONVERT_HEADS
    from hfbert.heads_hfbert import HEADS, MODEL_CLASSES
    from hfbert.modeling_hfbert import AUTO_MAP
    from hfbert.modeling_hfbert import __all__ as MODEL_NAMES

    assert len(HEADS) == 8 and set(AUTO_MAP) == {"AutoConfig", *HEADS.values()}
    assert {auto.__name__: model.__name__ for auto, model in hfbert.AUTO_CLASSES.items()} == {
        auto: f"HfBert{suffix}" for suffix, auto in HEADS.items()}
    assert CONVERT_HEADS == tuple(HEADS) and set(MODEL_CLASSES) <= set(MODEL_NAMES) & set(hfbert.__all__)
    listed = ('"AutoModelForNextSentencePrediction"', '"ForNextSentencePrediction"')
    spelled = [p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")
               if any(name in p.read_text() for name in listed)]
    assert spelled == ["heads_hfbert.py"]


EXAMPLE_CARD = REPO / "model_cards" / "example_finetuned.md"
EXAMPLE_INPUTS = dict(
    language="en", base_model="sentence-transformers/all-MiniLM-L6-v2",
    metrics={"eval_accuracy": 0.8125, "eval_f1": 0.8, "eval_mcc": 0.625}, pipeline_tag="text-classification",
    model_name="example-sentiment", task="text-classification", recipe="finetune_classification",
    pipeline_task="text-classification", model_family="hfbert", preset=None,
    train_data="train.jsonl (3000 rows)", eval_data="dev.jsonl (500 rows)", seed=42, epochs=1.0,
    learning_rate=5e-5, batch_size=32, max_length=128, labels={0: "negative", 1: "positive"},
    notes=["4 of 3000 train texts are longer than 128 tokens and were truncated (their tail is not seen)"],
)


def write_example_card(path: Path = EXAMPLE_CARD) -> None:
    render_model_card("finetuned.md", **EXAMPLE_INPUTS).save(path)


def test_the_example_card_is_the_template_rendered(tmp_path):
    write_example_card(tmp_path / "card.md")
    assert EXAMPLE_CARD.read_text() == (tmp_path / "card.md").read_text(), (
        "model_cards/example_finetuned.md is generated: run `python tests/test_house.py` to render it again")


# ----------------------------------------------------------------------------------------------------------------
# One settings system; one-line errors


@dataclasses.dataclass
class _Settings:
    source: str = dataclasses.field(metadata={"positional": True, "help": "a folder"})
    corpus: list[str] = dataclasses.field(metadata={"help": "files"})
    max_seq_length: int = dataclasses.field(default=128, metadata={"help": "tokens (100% of them)"})
    output_dir: str = dataclasses.field(default="out", metadata={"help": "folder", "aliases": ["--output"]})
    lowercase: bool = dataclasses.field(default=True, metadata={"help": "lower-case"})
    model: dict = dataclasses.field(default_factory=dict, metadata={"help": "overrides"})

    def __post_init__(self):
        if self.max_seq_length < 8:
            raise UsageError(f"--max_seq_length must be >= 8, got {self.max_seq_length}")


def test_command_parser_spellings_positionals_and_config_files(tmp_path):
    parser = CommandParser("hfbert demo", _Settings)
    got = parser.parse_values(["src", "--corpus", "a", "b", "--max-seq-length", "64", "--output-dir", "o",
                               "--no_lowercase", "--model", '{"hidden_size": 32}'])
    assert got == _Settings("src", ["a", "b"], 64, "o", False, {"hidden_size": 32})
    assert parser.parse_values(["src", "--corpus", "a", "--output", "p"]).output_dir == "p"  # the alias
    config = tmp_path / "run.yaml"
    config.write_text("source: from-file\ncorpus: [c.txt]\nmax-seq-length: 32\noutput: q\n")
    got = CommandParser("hfbert demo", _Settings).parse_values(["--config", str(config), "--max_seq_length", "16"])
    assert (got.source, got.corpus, got.max_seq_length, got.output_dir) == ("from-file", ["c.txt"], 16, "q")
    config.write_text("corpus: [c.txt]\nmax_seq_len: 32\n")
    with pytest.raises(UsageError, match=r"run.yaml: unknown setting\(s\) \['max_seq_len'\]"):
        CommandParser("hfbert demo", _Settings).parse_values(["src", "--config", str(config)])
    help_text = CommandParser("hfbert demo", _Settings).format_help()
    assert "SOURCE" in help_text and "--output_dir OUTPUT_DIR, --output-dir OUTPUT_DIR, --output" in help_text
    assert "(default: None)" not in help_text and "the same as --lowercase false" in help_text
    assert "tokens (100% of them) (default: 128)" in " ".join(help_text.split())


def test_settings_files_are_type_checked_naming_the_file_and_key(tmp_path):
    config = tmp_path / "run.yaml"
    for text, message in (("corpus: [a]\nmax_seq_length: long\n", "max_seq_length must be an integer, got 'long'"),
                          ("corpus: [a]\nlowercase: 'no'\n", "lowercase must be true or false, got 'no'"),
                          ("corpus: [1, 2]\n", "corpus must be a list of strings, got [1, 2]")):
        config.write_text(text)
        with pytest.raises(UsageError, match=re.escape(f"{config}: {message}")):
            CommandParser("hfbert demo", _Settings).parse_values(["src", "--config", str(config)])
    config.write_text("corpus: one.txt\n")  # one value where a list belongs, as on the command line
    assert CommandParser("hfbert demo", _Settings).parse_values(["src", "--config", str(config)]).corpus == ["one.txt"]


def test_command_parser_errors_are_one_line_with_status_2(capsys):
    parser = CommandParser("hfbert demo", _Settings)
    for argv, message in ((["src", "--corpus", "a", "--max_seq_length", "4"], "--max_seq_length must be >= 8"),
                          (["src"], "the following arguments are required: --corpus"),
                          (["src", "--corpus", "a", "--max_seq_length", "x"], "invalid int value: 'x'"),
                          (["src", "--corpus", "a", "--bogus"], "unrecognized arguments: --bogus")):
        with pytest.raises(SystemExit) as exc:
            parser.parse(argv)
        err = capsys.readouterr().err
        assert exc.value.code == 2 and err.startswith("hfbert demo: error: ") and message in err, err
        assert err.count("\n") == 1, err

    def body():
        raise UsageError("data.txt:3: a line that is not JSON\n(the second line of the message)")

    assert run_command("hfbert demo", body) == 2
    assert capsys.readouterr().err == "hfbert demo: error: data.txt:3: a line that is not JSON (the second line " \
                                      "of the message)\n"


def test_dispatcher_help_version_and_unknown_command(capsys, monkeypatch):
    assert cli.main(["--help"]) == 0
    shown = capsys.readouterr().out
    assert all(f"  {name} " in shown for name in cli.COMMANDS)
    assert cli.main(["--version"]) == 0 and re.fullmatch(r"\d+\.\d+\.\d+\S*\n", capsys.readouterr().out)
    assert cli.main(["pretrian"]) == 2
    assert capsys.readouterr().err == ("hfbert: error: unknown command 'pretrian'; choose from "
                                       f"{', '.join(cli.COMMANDS)} (hfbert --help)\n")
    # A usage error a command lets through still comes out as one line under the command's name.
    monkeypatch.setitem(cli.COMMANDS, "demo", ("test_house:_raising_command", "raises"))
    monkeypatch.syspath_prepend(str(Path(__file__).parent))
    assert cli.main(["demo"]) == 2 and capsys.readouterr().err == "hfbert demo: error: bad --x\n"


def _raising_command(argv):
    raise UsageError("bad --x")


# ----------------------------------------------------------------------------------------------------------------
# The wheel: installed (not editable) into a fresh environment, every command run from an unrelated folder

TINY_MODEL = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 37}

# Runs inside the fresh environment, in an empty folder: every command's --help, then a tiny real job of each kind.
INSTALLED_RUN = """
import contextlib, gzip, io, json, sys
from importlib.resources import files
from pathlib import Path

import hfbert
from hfbert.cli import COMMANDS, main

venv, tiny_model = Path(sys.argv[1]), json.loads(sys.argv[2])
assert Path(hfbert.__file__).resolve().is_relative_to(venv.resolve()), hfbert.__file__
for name in COMMANDS:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = main([name, "--help"])
        except SystemExit as exit:
            code = exit.code
    assert code in (0, None) and f"usage: hfbert {name}" in out.getvalue(), (name, code, out.getvalue()[-300:])

with gzip.open(files("hfbert") / "corpora" / "en_austen_6novels.txt.gz", "rt", encoding="utf-8") as f:
    lines = [next(f) for _ in range(400)]
Path("corpus.txt").write_text("".join(lines), encoding="utf-8")
assert main(["train-tokenizer", "--input", "corpus.txt", "--vocab_size", "400", "--output_dir", "tok",
             "--no_progress_bar"]) == 0
assert main(["prepare", "--input", "corpus.txt", "--tokenizer", "tok", "--output_dir", "prepared",
             "--input_layout", "paragraphs", "--document_boundary", "chapter", "--max_seq_length", "64",
             "--dupe_factor", "1"]) == 0
Path("pretrain.json").write_text(json.dumps({
    "prepared": ["prepared"], "preset": "tiny", "model": tiny_model, "batch_size": 4, "max_seq_length": 64,
    "max_steps": 2, "logging_steps": 1, "eval_steps": 2, "save_steps": 2, "max_time_minutes": None,
    "max_eval_examples": 8, "progress_bar": False, "report_to": ["jsonl"], "output_dir": "pretrained",
    "fill_mask_text": "She was [MASK] happy."}))
assert main(["pretrain", "--config", "pretrain.json"]) == 0
assert main(["convert", "pretrained", "as_bert"]) == 0
from hfbert.evaluation import load_suite
assert [t.name for t in load_suite("glue").tasks][:2] == ["cola", "sst2"] and load_suite("local").tasks
Path("sentences.jsonl").write_text("".join(json.dumps({"text": line.strip() or ".", "label": i % 2}) + "\\n"
                                           for i, line in enumerate(lines[:40])), encoding="utf-8")
Path("suite.yaml").write_text(json.dumps({"name": "mini", "tasks": [{
    "name": "parity", "type": "classification", "file": "sentences.jsonl", "validation_rows": 8, "epochs": 1,
    "max_length": 32, "batch_size": 8, "columns": {"text": "text", "label": "label"}, "metric": "eval_accuracy"}]}))
assert main(["evaluate", "pretrained", "--suite", "suite.yaml", "--seeds", "1", "--output_dir", "evaluated",
             "--progress_bar", "false"]) == 0
print(json.dumps({
    "evaluated": sorted(json.loads(Path("evaluated/results.json").read_text())["tasks"]),
    "card": Path("pretrained/README.md").read_text(encoding="utf-8"),
    "converted": json.loads(Path("as_bert/config.json").read_text())["model_type"],
    "prepared": sorted(p.name for p in Path("prepared").iterdir()),
}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A wheel of the working tree, installed with pip into a new environment that sees the dependencies already
    installed here but not this checkout (whose editable install is a .pth hook the new environment never runs)."""
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    # The package with the benchmarks beside it, as in a checkout: what the wheel leaves out is pyproject's choice.
    for folder in (PACKAGE, BENCHMARKS):
        shutil.copytree(folder, source / folder.name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "results"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", str(root / "dist"),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = (root / "dist").glob("hfbert-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             check=True, capture_output=True, text=True).stdout.strip()
    # A path line only extends sys.path: the .pth files in that folder (the editable hfbert) are not run.
    Path(purelib, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # --ignore-installed: never touch (uninstall) the editable hfbert that the dependency folder lists.
    subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "--quiet", "install", "--no-deps",
                    "--no-index", "--ignore-installed", str(wheel)], check=True, capture_output=True, timeout=300)
    env = {key: value for key, value in os.environ.items() if not key.startswith(("PYTHON", "PYTEST"))}
    env.update(HF_HUB_OFFLINE="1", HF_HOME=str(root / "hf"), TOKENIZERS_PARALLELISM="false", OMP_NUM_THREADS="1")
    return venv, wheel, env


@pytest.mark.slow
def test_the_wheel_ships_the_templates_the_corpus_and_the_metrics(installed):
    venv, wheel, _ = installed
    names = set(subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True,
                               check=True).stdout.split())
    assert {"hfbert/model_cards/finetuned.md", "hfbert/model_cards/pretrained.md",
            "hfbert/corpora/en_austen_6novels.txt.gz", "hfbert/evaluation/suites/glue.yaml",
            "hfbert/evaluation/suites/local.yaml", "hfbert/recipes/finetune_ner.py"} <= names
    assert {f"hfbert/metrics/{name}/{name}.py" for name in hfbert.metrics.NAMES} <= names  # evaluate.load reads them


@pytest.mark.slow
def test_the_wheel_holds_the_package_and_no_benchmark(installed, tmp_path):
    """The product is the package: what measures it (benchmarks/) stays out of the wheel, and the installed package
    imports from any folder."""
    venv, wheel, env = installed
    names = subprocess.run([sys.executable, "-m", "zipfile", "-l", str(wheel)], capture_output=True, text=True,
                           check=True).stdout.split()
    files = [name for name in names if "/" in name]
    tops = {name.split("/")[0] for name in files}
    assert "hfbert" in tops and all(top.endswith(".dist-info") for top in tops - {"hfbert"}), tops
    modules = {name for name in files if name.endswith(".py")}
    assert modules == {f"hfbert/{p.relative_to(PACKAGE).as_posix()}" for p in PACKAGE.rglob("*.py")}
    # No benchmark under any name: no file of benchmarks/, no package of studies or benchmarks.
    with zipfile.ZipFile(wheel) as archive:
        shipped = {archive.read(name) for name in modules}
    copied = [p.relative_to(REPO).as_posix() for p in BENCHMARKS.rglob("*.py") if p.read_bytes() in shipped
              and p.stat().st_size > 200]  # an empty __init__ is no code
    assert not copied, f"benchmark code in the wheel: {copied}"
    folders = {part for name in modules for part in name.split("/")[:-1]}
    assert not folders & {"studies", "benchmarks", *(p.parent.name for p in BENCHMARKS.glob("*/__init__.py"))}
    work = tmp_path / "elsewhere"
    work.mkdir()
    imported = subprocess.run([venv / "bin" / "python", "-c", "import hfbert; print(hfbert.__file__)"], cwd=work,
                              env=env, capture_output=True, text=True, timeout=120)
    assert imported.returncode == 0, imported.stderr[-2000:]
    assert Path(imported.stdout.strip()).resolve().is_relative_to(venv.resolve()), imported.stdout


@pytest.mark.slow
def test_every_command_runs_from_the_installed_wheel(installed, tmp_path):
    venv, _, env = installed
    work = tmp_path / "elsewhere"
    work.mkdir()
    shown = subprocess.run([venv / "bin" / "hfbert", "--help"], cwd=work, env=env, capture_output=True, text=True,
                           timeout=120)
    assert shown.returncode == 0 and "usage: hfbert <command>" in shown.stdout, shown.stderr
    (work / "run.py").write_text(textwrap.dedent(INSTALLED_RUN))
    done = subprocess.run([venv / "bin" / "python", "run.py", str(venv), json.dumps(TINY_MODEL)], cwd=work,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["converted"] == "bert"
    assert result["evaluated"] == ["parity"]  # hfbert evaluate with the recipes and suites inside the wheel
    assert "masked language modelling" in result["card"]  # rendered from the template inside the wheel
    assert "hfbert_prepare.json" in result["prepared"], result["prepared"]


if __name__ == "__main__":
    write_example_card()
    print(f"wrote {EXAMPLE_CARD}")
