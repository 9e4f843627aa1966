"""What step is audited: a training step, a prefill, or one decode token against a KV cache.

Training and inference ask different things of the same op (a GEMM is compute-bound at 8 x 4096 tokens and
memory-bound at one token), so the audit traces each scenario separately and compares them.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Literal

from npuport.errors import NpuportError

Kind = Literal["train", "prefill", "decode"]
KINDS: tuple[Kind, ...] = ("train", "prefill", "decode")


@dataclass(frozen=True)
class Scenario:
    """One audited step. `seq` is the number of new tokens per sequence; `past` the KV-cache length before it."""

    name: str
    kind: Kind
    batch: int
    seq: int
    past: int = 0
    # decode only: the model keeps no cache, so each new token re-runs the whole context (past + seq tokens)
    recompute: bool = False
    # how the step is launched, for its time: op by op from Python ("eager"), its eager kernels as one captured graph
    # ("graph": CUDA graphs; NPUGraph / aclgraph on the NPU), compiled ("compile": torch.compile's default mode,
    # Inductor: pointwise chains fused into one kernel each, every kernel still launched from Python), or compiled and
    # replayed as graphs ("reduce-overhead": torch.compile(mode="reduce-overhead"), CUDA graph trees)
    mode: str = "eager"

    @property
    def tokens(self) -> int:
        return self.batch * self.seq

    def describe(self) -> str:
        base = f"{self.name}: batch {self.batch} x {self.seq} token{'s' if self.seq != 1 else ''}"
        if self.kind == "train":
            base += ", forward + backward"
        if self.mode != "eager":
            base += f", {self.mode} mode"
        if self.past and self.recompute:
            base += f", no cache: re-runs the {self.past + self.seq}-token context"
        elif self.past:
            base += f", after {self.past} tokens of context"
        return base

    def spec(self) -> str:
        """The --scenario text that gives this step back through parse_scenario: 'decode:batch=1,seq=1,past=4096'."""
        return (f"{self.name}:batch={self.batch},seq={self.seq}" + (f",past={self.past}" if self.past else "")
                + (f",mode={self.mode}" if self.mode != "eager" else ""))

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"name": self.name, "kind": self.kind, "batch": self.batch, "seq": self.seq, "past": self.past}
        if self.kind == "decode":
            out["recompute"] = self.recompute
        out["mode"] = self.mode
        return out


DEFAULTS: dict[Kind, Scenario] = {
    "train": Scenario("train", "train", batch=8, seq=4096),
    "prefill": Scenario("prefill", "prefill", batch=1, seq=4096),
    "decode": Scenario("decode", "decode", batch=1, seq=1, past=4096),
}
DEFAULT_SET = ("train", "prefill", "decode")


MODES = ("eager", "graph", "compile", "reduce-overhead")
GRAMMAR = "NAME[:batch=N,seq=N,past=N,mode=eager|graph|compile|reduce-overhead]"  # the --scenario grammar of audit, bench and parity (docs/cli.md)


MAX_SIZE = 2**31 - 1  # the largest batch, sequence or context a scenario takes


def parse_scenario(text: str) -> Scenario:
    """One scenario: 'decode' or 'decode:batch=4,past=8192' or 'train:seq=2048' (GRAMMAR); a name alone is that
    step's default size (DEFAULTS), and each of batch=, seq=, past= replaces one of its sizes."""
    if "+" in text:  # parity, bench and profile's one-scenario options come here whole
        raise NpuportError(f"one scenario expected, received {text!r}", "one of train, prefill, decode with its sizes "
                           "('+' joins scenarios only where a command takes several: audit, profile record)", text)
    name, colon, opts = text.strip().partition(":")
    if name not in DEFAULTS:
        raise NpuportError(f"unknown scenario {name!r}", "train, prefill or decode, optionally with "
                           ":batch=N,seq=N,past=N,mode=M", text)
    sc = DEFAULTS[name]  # type: ignore[index]
    if colon and not opts.strip():  # 'prefill:' reads as options forgotten, not as the default sizes asked for
        raise NpuportError(f"scenario {text!r} ends with ':' and no options", f"{name} alone, or {name}:batch=N,seq=N,"
                           "past=N,mode=M", text)
    if not opts:
        return sc
    values: dict[str, Any] = {}  # batch / seq / past, all int; Any lets it fill replace()'s keyword arguments
    for part in opts.split(","):
        key, eq, val = part.partition("=")
        key = key.strip()
        if key in values:  # batch=1,batch=2: which one was meant is not for us to guess
            raise NpuportError(f"{key}= given twice in {text!r}", "each of batch=, seq=, past=, mode= at most once", text)
        if key == "mode" and eq:
            if val.strip() not in MODES:
                raise NpuportError(f"bad scenario option {part!r} in {text!r}", "mode=eager, mode=graph, mode=compile or mode=reduce-overhead", part)
            values["mode"] = val.strip()
            continue
        if not eq or key not in ("batch", "seq", "past") or not val.strip().isdigit() or int(val) < 1 and key != "past":
            raise NpuportError(f"bad scenario option {part!r} in {text!r}", "batch=N, seq=N or past=N with N a positive integer, or mode=M", part)
        if int(val) > MAX_SIZE:  # larger overflows torch's int64 sizes inside the model, a traceback far from here
            raise NpuportError(f"bad scenario option {part!r} in {text!r}", f"a size at most {MAX_SIZE:,}", part)
        values[key] = int(val)
    if sc.kind == "decode" and values.get("seq", 1) != 1:
        raise NpuportError("a decode scenario takes exactly one new token", "seq=1 (or leave seq out)", text)
    return replace(sc, **values)


def parse_scenarios(items: tuple[str, ...] | list[str] | None) -> list[Scenario]:
    """Each item may hold several comma-free names separated by '+' or be repeated: --scenario train --scenario decode."""
    if not items:
        return [DEFAULTS[n] for n in DEFAULT_SET]  # type: ignore[index]
    out: list[Scenario] = []
    for item in items:
        for piece in item.split("+"):
            if not piece.strip():  # "train+" or "+": a name left out around a '+'
                raise NpuportError(f"an empty scenario in {item!r}", "names joined by '+', none left empty (train+decode)",
                                   item)
            sc = parse_scenario(piece)
            if any(s.name == sc.name for s in out):
                raise NpuportError(f"scenario {sc.name!r} given twice", "each of train / prefill / decode at most once", item)
            out.append(sc)
    return out


def fit_to_context(sc: Scenario, max_positions: int | None) -> tuple[Scenario, str | None]:
    """Shrink seq / past so the step fits the model's position limit; say so when it changes."""
    if not max_positions or sc.seq + sc.past <= max_positions:
        return sc, None
    if sc.kind == "decode":
        new = replace(sc, past=max(0, max_positions - 1))
    else:
        new = replace(sc, seq=max_positions)
    return new, f"{sc.name}: shortened to fit the model's {max_positions} positions ({sc.describe()} -> {new.describe()})"
