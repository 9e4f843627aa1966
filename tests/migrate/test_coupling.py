"""What `npuport migrate` holds back with the "cuda" device strings (npuport.scan.migrate_coupling,
mappings/migrate.yaml): the moves to the device, device checks and device queries (is_bf16_supported, amp,
synchronize, memory statistics...) whose edit alone changes what the program does, a local module it cannot read,
and the device argument of torch.set_default_device."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Callable

import pytest

from npuport.scan.migrate import _apply, migrate_program
from npuport.scan.migrate_coupling import ProgramFinder, load_coupling
from tests.migrate.device_world import run

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "migrate"


def _program(tmp_path: Path, **files: str):  # noqa: ANN202 - a Program
    tmp_path.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (tmp_path / f"{name}.py").write_text(text)
    return migrate_program(tmp_path / f"{next(iter(files))}.py", root=tmp_path)


def test_set_default_device_is_a_device_argument(tmp_path: Path) -> None:
    """The reviewer's case: set_default_device("cuda") held every string back, and .cuda() alone was rewritten."""
    program = _program(tmp_path, t='import torch\nx = torch.zeros(2).cuda()\nif x.device.type == "cuda":\n'
                                   '    print("fast path")\ntorch.set_default_device("cuda")\n')
    m = program.files[0]
    assert program.held == {} and m.remaining == []
    for moved in ("x = torch.zeros(2).npu()", 'if x.device.type == "npu":', 'torch.set_default_device("npu")'):
        assert moved in m.migrated, moved


def test_held_strings_hold_the_moves_and_checks_that_read_them(tmp_path: Path) -> None:
    program = _program(tmp_path, t='import torch\nx = torch.zeros(2).cuda()\nif x.device.type == "cuda":\n'
                                   '    print("fast path")\nprint(x.is_cuda, "cuda")\ntorch.cuda.synchronize()\n'
                                   'torch.cuda.manual_seed(0)\n')
    m = program.files[0]
    assert program.held == {"device": ["t.py:5"]}
    assert ".cuda()" in m.migrated and "x.is_cuda" in m.migrated and '== "cuda"' in m.migrated
    assert "torch.cuda.synchronize()" in m.migrated  # raises without CUDA where torch.npu's returns: held too
    assert "torch.npu.manual_seed(0)" in m.migrated  # ignored without CUDA, and seeds no tensor of this run: ported
    held = {(d.line, d.id): d for d in m.remaining}
    for key in ((2, "NPS003"), (5, "NPS006"), (6, "NPS001")):
        assert held[key].level == "warning" and "not ported: " in held[key].message, key  # a hand change, with why
    assert any("3 edit(s) that move to, check or use the device held back" in n and "t.py:2, t.py:5, t.py:6" in n
               for n in program.notes)


def test_an_availability_check_that_picks_a_held_string_stays(tmp_path: Path) -> None:
    """`"cuda" if torch.npu.is_available() else "cpu"` would pick CUDA exactly when an NPU is present."""
    text = 'import torch\n\ndef pick():\n    return "cuda" if torch.cuda.is_available() else "cpu"\n'
    m = _program(tmp_path, u=text).files[0]
    assert m.migrated == text and not m.added_import
    (d,) = [d for d in m.remaining if d.id == "NPS001"]
    assert d.level == "warning" and "torch.cuda.is_available" in d.message and "device strings are held back" in d.message


def test_a_check_npuport_cannot_rewrite_holds_the_strings(tmp_path: Path) -> None:
    """Through an alias the check stays torch.cuda: rewriting the strings beside it would run on the CPU on an NPU."""
    program = _program(tmp_path, a='import torch\nimport torch.cuda as tc\n'
                                   'device = "cuda" if tc.is_available() else "cpu"\nx = torch.zeros(2).to(device)\n')
    assert program.held == {"device": ["a.py:3"]} and '"cuda" if tc.is_available()' in program.files[0].migrated
    assert any("a.py:3 check(s), select(s) or ask(s) about the device in a way npuport cannot rewrite" in n for n in program.notes)


def test_an_import_of_a_held_check_stays_with_its_names(tmp_path: Path) -> None:
    text = ('import torch\nfrom torch.cuda import is_available, synchronize\nLABELS = {"gpu": "cuda"}\n'
            "if is_available():\n    synchronize()\n")
    m = _program(tmp_path, b=text).files[0]
    assert m.migrated == text
    assert {(d.line, d.id) for d in m.remaining} >= {(4, "NPS001"), (5, "NPS001")}  # both names counted as not ported


def test_held_program_takes_the_branches_it_took_before_on_an_npu() -> None:
    """Run against a stand-in torch on an Ascend machine: the migrated program decides as the unported one did (the
    CPU, no fast path). Rewriting the checks alone (the earlier rule) picks "cuda" there and moves the tensor."""
    folder = FIXTURES / "held_checks"
    original = {"train": (folder / "train.py").read_text()}
    program = migrate_program(folder / "train.py", root=folder)
    migrated = {"train": program.files[0].migrated}
    before, calls_before = run(original, "train", "npu")
    after, calls_after = run(migrated, "train", "npu")
    assert after == before and after["device"] == "cpu" and after["fast_path"] is False and after["use_bf16"] is False
    names = [c[0] for c in calls_after]
    assert "npu.manual_seed" in names  # ignored on both sides: still made
    assert {"cuda.amp.GradScaler", "cuda.synchronize"} <= set(names)  # disabled / raising without CUDA, as before
    text = original["train"]
    edits = [e for r in ProgramFinder(text, ast.parse(text)).run() if not r.group for e in r.edits]
    earlier, calls_earlier = run({"train": "import torch_npu\n" + _apply(text, edits)}, "train", "npu")
    assert earlier["device"] == "cuda" and ("Tensor.npu", (), ()) in calls_earlier  # the silent change, caught
    assert earlier["use_bf16"] is True and "npu.amp.GradScaler" in [c[0] for c in calls_earlier]  # bf16, scaling on


def test_an_unreadable_local_module_holds_every_string(tmp_path: Path) -> None:
    """helper.py tests the device string it is given; npuport cannot read it, so nothing may be rewritten."""
    train = ('import torch, helper\ndevice = "cuda" if torch.cuda.is_available() else "cpu"\n'
             'helper.setup(device)\ntorch.cuda.synchronize()\ntorch.cuda.empty_cache()\n')
    program = _program(tmp_path, train=train, helper='def setup(device):\n    if device == "cuda" print("fast")\n')
    assert [m.display for m in program.files] == ["train.py"] and list(program.skipped) == ["helper.py"]
    assert "not valid Python" in program.skipped["helper.py"] and str(tmp_path) not in program.skipped["helper.py"]
    assert program.held == {"device": ["helper.py"]}
    assert '"cuda" if torch.cuda.is_available()' in program.files[0].migrated
    assert "torch.cuda.synchronize()" in program.files[0].migrated and "torch.npu.empty_cache()" in program.files[0].migrated
    summary = program.summary_lines()
    assert summary[1].startswith("helper.py: not read, not ported")
    assert summary[-1] == "2 file(s): 1 mechanical change(s); 3 reference(s) still need a hand change; 1 file(s) not read, not ported"
    assert sum("helper.py" in n for n in program.notes) == 1 and "could not be read" in program.notes[0]


def test_an_unreadable_module_without_device_code_is_still_not_ported(tmp_path: Path) -> None:
    program = _program(tmp_path, train="import helper\nhelper.run()\n", helper="def run(:\n")
    assert program.held == {} and program.diff == ""
    assert "all ported" not in program.summary_lines()[-1] and "1 file(s) not read" in program.summary_lines()[-1]


def test_a_coupled_id_must_be_a_diagnostic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from npuport.errors import MappingError

    _broken(tmp_path, monkeypatch, lambda d: d["coupled"]["ids"].update(NPS999={"why": "a typo of NPS003", "source": "this test"}))
    try:
        with pytest.raises(MappingError, match="NPS999.*not a diagnostic"):
            load_coupling()
    finally:
        load_coupling.cache_clear()

REVIEWER_REPRO = '''import torch
LABELS = {"gpu": "cuda"}          # a "cuda" string outside a device argument: the strings are held back
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(4, 4)
if torch.cuda.is_bf16_supported():
    model = model.to(torch.bfloat16)
scaler = torch.cuda.amp.GradScaler()
'''


def test_device_queries_and_amp_are_held_with_the_strings(tmp_path: Path) -> None:
    """The reviewer's repro: on an NPU host the original got False from is_bf16_supported and a disabled scaler (no
    CUDA); rewritten alone, torch.npu's answers True and scales the loss of a run that stays on the CPU."""
    program = _program(tmp_path, t=REVIEWER_REPRO)
    m = program.files[0]
    assert m.migrated == REVIEWER_REPRO and not m.added_import and program.held == {"device": ["t.py:2"]}
    held = {(d.line, d.id): d.message for d in m.remaining}
    assert "torch.cuda.is_bf16_supported" in held[(5, "NPS001")] and "not ported: answers False" in held[(5, "NPS001")]
    assert "torch.cuda.amp.GradScaler" in held[(7, "NPS030")] and "not ported: " in held[(7, "NPS030")]
    before, _ = run({"t": REVIEWER_REPRO}, "t", "npu")
    after, calls = run({"t": m.migrated}, "t", "npu")
    assert after == before and ("Tensor.to", ("bfloat16",), ()) not in calls
    assert "cuda.amp.GradScaler" in [c[0] for c in calls]


@pytest.mark.parametrize("line, kept", [
    ("n = torch.cuda.get_device_name(0)", "torch.cuda.get_device_name"),  # raises without CUDA; names the NPU
    ("free, total = torch.cuda.mem_get_info()", "torch.cuda.mem_get_info"),
    ("m = torch.cuda.max_memory_allocated()", "torch.cuda.max_memory_allocated"),  # 0 without CUDA
    ("torch.cuda.reset_peak_memory_stats()", "torch.cuda.reset_peak_memory_stats"),
    ("torch.cuda.synchronize()", "torch.cuda.synchronize"),
    ("mem = torch.cuda.get_device_properties(0).total_memory", "torch.cuda.get_device_properties"),
    ("s = torch.cuda.Stream()", "torch.cuda.Stream"),
    ("g = torch.cuda.CUDAGraph()", "torch.cuda.CUDAGraph"),
    ("ctx = torch.cuda.amp.autocast(dtype=torch.bfloat16)", "torch.cuda.amp.autocast"),
    ("ctx = torch.autocast('cuda', dtype=torch.bfloat16)", "torch.autocast('cuda'"),  # a device string of the group
    ("scaler = torch.amp.GradScaler('cuda')", "torch.amp.GradScaler('cuda')"),
    ("state = torch.cuda.random.get_rng_state()", "torch.cuda.random.get_rng_state"),
    ("mod = torch.cuda", "mod = torch.cuda"),
])
def test_each_device_dependent_call_stays_while_strings_are_held(tmp_path: Path, line: str, kept: str) -> None:
    text = f'import torch\nprint("cuda")\n{line}\n'
    program = _program(tmp_path, t=text)
    m = program.files[0]
    assert program.held == {"device": ["t.py:2"]} and m.migrated == text, m.diff
    assert kept in m.migrated and any(d.line == 3 and "not ported: " in d.message for d in m.remaining)


@pytest.mark.parametrize("call", ["torch.cuda.manual_seed(0)", "torch.cuda.manual_seed_all(0)", "torch.cuda.seed()",
                                  "torch.cuda.seed_all()", "torch.cuda.empty_cache()"])
def test_calls_ignored_on_both_sides_are_still_ported(tmp_path: Path, call: str) -> None:
    m = _program(tmp_path, t=f'import torch\nprint("cuda")\n{call}\n').files[0]
    assert call.replace("torch.cuda", "torch.npu") in m.migrated and m.added_import
    assert not any(d.line == 3 for d in m.remaining)


def test_an_amp_import_is_held_with_the_names_it_binds(tmp_path: Path) -> None:
    text = ('import torch\nfrom torch.cuda.amp import GradScaler, autocast\nfrom torch.cuda import manual_seed\n'
            'print("cuda")\nmanual_seed(0)\nscaler = GradScaler()\n')
    m = _program(tmp_path, c=text).files[0]
    assert "from torch.cuda.amp import GradScaler, autocast" in m.migrated  # held: it ports GradScaler
    assert "from torch.npu import manual_seed" in m.migrated  # ignored on both sides: ported
    assert any(d.line == 6 and d.id == "NPS030" and "not ported: " in d.message for d in m.remaining)


def test_a_query_npuport_cannot_rewrite_holds_the_strings_unless_it_raises(tmp_path: Path) -> None:
    """`tc.is_bf16_supported()` kept beside "npu" strings would answer False on the NPU, silently: it holds the strings.
    `tc.synchronize()` and a properties field the NPU lacks raise there: a listed hand change, the strings still move
    (modded-nanogpt reads get_device_properties(...).multi_processor_count)."""
    quiet = _program(tmp_path / "q", q='import torch\nimport torch.cuda as tc\nx = torch.zeros(2).to("cuda")\n'
                                       'bf16 = tc.is_bf16_supported()\n')
    assert quiet.held == {"device": ["q.py:4"]} and '.to("cuda")' in quiet.files[0].migrated
    loud = _program(tmp_path / "l", l='import torch\nimport torch.cuda as tc\nx = torch.zeros(2).to("cuda")\ntc.synchronize()\n'
                                      'sm = torch.cuda.get_device_properties(0).multi_processor_count\n')
    m = loud.files[0]
    assert loud.held == {} and '.to("npu")' in m.migrated and "tc.synchronize()" in m.migrated
    assert {(d.line, d.id) for d in m.remaining} == {(4, "NPS001"), (5, "NPS051")}
    assert not any("not ported" in d.message for d in m.remaining)


def _broken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mutate: Callable[[dict], object]) -> None:
    import shutil

    import yaml

    from npuport import mappings

    root = tmp_path / "mappings"
    shutil.copytree(Path(mappings.__file__).parent, root, ignore=shutil.ignore_patterns("*.py", "__pycache__", "schemas"))
    doc = yaml.safe_load((root / "migrate.yaml").read_text())
    mutate(doc)
    (root / "migrate.yaml").write_text(yaml.safe_dump(doc))
    monkeypatch.setenv("NPUPORT_MAPPINGS", str(root))
    load_coupling.cache_clear()


@pytest.mark.parametrize("mutate, match", [
    (lambda d: d["coupled"]["cuda_names"].pop("is_bf16_supported"), "is_bf16_supported.*neither"),
    (lambda d: d["coupled"]["ids"].pop("NPS030"), "NPS030.*rewrites the torch.cuda names of this group"),
    (lambda d: d["independent"].update(synchronize=dict(d["independent"]["empty_cache"])), "synchronize.*decide it once"),
    (lambda d: d["independent"].update(nvtx=dict(d["independent"]["empty_cache"])), "nvtx.*not a torch.cuda name"),
])
def test_every_rewritten_cuda_name_is_decided_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   mutate: Callable[[dict], object], match: str) -> None:
    """A name added to source_apis.yaml's npu_names must be decided here, or every load fails: never ported by default."""
    from npuport.errors import MappingError

    _broken(tmp_path, monkeypatch, mutate)
    try:
        with pytest.raises(MappingError, match=match):
            load_coupling()
    finally:
        load_coupling.cache_clear()
