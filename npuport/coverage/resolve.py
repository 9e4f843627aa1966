"""One status per (operator overload, torch_npu release): native, composite, cpu-fallback, unsupported, npu-custom,
and for a registered kernel with a conditional host path (mappings/coverage/conditions.yaml): cpu-path, conditional.

Decision order for aten overloads (first match wins), all from the checked-in data:
1. registered by torch_npu (PrivateUse1, or AutogradPrivateUse1 for `autograd:` entries and for
   CompositeImplicitAutograd ops it overrides, e.g. scaled_dot_product_attention) -> native;
2. a structured functional/inplace whose out= variant carries the kernel (torchgen's
   CompositeExplicitAutogradNonFunctional wrapper calls it through the dispatcher) -> the out= variant's status;
3. CompositeImplicitAutograd in the paired torch -> composite (implicit: decomposes before reaching the NPU);
4. CompositeExplicitAutograd[NonFunctional] -> composite (explicit: a composite kernel also serves PrivateUse1);
5. only a CPU kernel -> cpu-fallback (torch_npu's npu_cpu_fallback copies the tensors to the host and back);
6. no kernel the fallback can use, or an overload the paired torch does not have -> unsupported.
Ops of other namespaces (fsdp::, torchvision::) are decided by what their library registered in the traced
environment: PrivateUse1 -> native, a composite kernel -> composite, CPU only -> cpu-fallback, none -> unsupported.
A native aten overload whose kernel (or whose structured out= variant's kernel) has a recorded condition is then
checked against the call, the target chip and the CANN version when the caller gives any of them: a condition that
holds -> cpu-path (the kernel copies to the host and back itself), one npuport cannot decide -> conditional, none ->
native. Without a call, chip or CANN version the status is the registration's, as before. A release whose op-plugin
source nobody read takes the conditions of the release conditions.yaml carries them from (`carried:`); its condition,
detail and `inferred_from` say so: inferred, not verified.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from npuport.coverage.conditions import CallLike, ConditionEntry, Verdict, conditions_for, evaluate
from npuport.coverage.database import CoverageDB, earliest_by_build_date, load, resolve_version
from npuport.coverage.fallback import FALLBACK_ERROR_ENV, first_release_with_switch
from npuport.coverage.names import namespace, normalize_op

STATUSES = ("native", "composite", "cpu-fallback", "unsupported", "npu-custom", "cpu-path", "conditional")
RUNS_ON_NPU = frozenset({"native", "npu-custom"})
LEAVES_NPU = frozenset({"cpu-fallback", "unsupported", "cpu-path"})  # the op does not (or cannot) run on the NPU
ACL_ONLY_RISK = "acl_op only: raises on aclnn-only SoCs"


@dataclass(frozen=True)
class Resolution:
    op: str
    version: str
    status: str  # one of STATUSES
    paths: tuple[str, ...]  # implementation paths for native / npu-custom; () otherwise
    risk: str | None
    detail: str  # one sentence: why this status
    composite_kind: str | None = None  # 'implicit' | 'explicit' for composites
    children: tuple["Resolution", ...] = field(default=())  # the observed decomposition, when the caller gave it
    condition: str | None = None  # cpu-path / conditional: the condition that holds, or that npuport cannot decide
    sources: tuple[str, ...] = ()  # op-plugin path:lines@commit of the conditions checked
    inferred_from: str | None = None  # this release's source was not read: the conditions are that release's

    @property
    def all_children_native(self) -> bool | None:
        """For a composite resolved with children: do all of them run on the NPU? None when none were given."""
        if not self.children:
            return None
        return all(c.status in RUNS_ON_NPU for c in self.children)

    @property
    def runs_on_npu(self) -> bool:
        return self.status in RUNS_ON_NPU


def _fallback_risk(db: CoverageDB) -> str:
    if db.fallback_error_env:
        return f"runs on the host CPU; {db.fallback_error_env}=1 turns this fallback into an error"
    first = first_release_with_switch()
    since = f" ({FALLBACK_ERROR_ENV} exists from torch_npu {first})" if first else ""
    return f"runs on the host CPU; this release has no switch to make it an error{since}"


def _native(op: str, db: CoverageDB, paths: tuple[str, ...], via: str | None = None) -> Resolution:
    risk = ACL_ONLY_RISK if paths == ("acl_op",) else None
    where = ", ".join(paths)
    if via:
        detail = f"structured kernel: runs through {via}, which torch_npu {db.version} registers ({where})"
    elif op in db.native_composites:
        detail = (f"torch_npu {db.version} overrides PyTorch's CompositeImplicitAutograd decomposition "
                  f"(AutogradPrivateUse1, {where}): one NPU op, not its CPU decomposition")
    elif op in db.autograd:
        detail = f"registered at AutogradPrivateUse1 by torch_npu {db.version} ({where})"
    else:
        detail = f"registered at PrivateUse1 by torch_npu {db.version} ({where})"
    return Resolution(op, db.version, "native", paths, risk, detail)


def _aten(op: str, db: CoverageDB, depth: int = 0) -> Resolution:
    if op in db.native:
        return _native(op, db, db.native[op])
    if op in db.delegates and depth < 3:
        out = db.delegates[op]
        inner = _aten(out, db, depth + 1)
        if inner.status == "native":
            return _native(op, db, inner.paths, via=out)
        return replace(inner, op=op, detail=f"structured kernel: runs through {out}; {inner.detail}")
    group = db.torch_category.get(op)
    torch = f"torch {db.torch}"
    if group == "implicit":
        return Resolution(op, db.version, "composite", (), None,
                          f"not registered by torch_npu {db.version}; CompositeImplicitAutograd in {torch}: "
                          "decomposes into other aten ops before dispatch", "implicit")
    if group == "explicit":
        return Resolution(op, db.version, "composite", (), None,
                          f"not registered by torch_npu {db.version}; CompositeExplicitAutograd in {torch}: "
                          "its composite kernel calls other aten ops on the NPU", "explicit")
    if group == "cpu":
        note = "; registered for quantized tensors only" if op in db.quant else ""
        return Resolution(op, db.version, "cpu-fallback", (), _fallback_risk(db),
                          f"not registered by torch_npu {db.version}; only a CPU kernel in {torch}: "
                          f"npu_cpu_fallback copies its tensors to the host and back{note}")
    if group == "none":
        return Resolution(op, db.version, "unsupported", (), "fails at run time",
                          f"not registered by torch_npu {db.version} and {torch} has no CPU or composite kernel "
                          "for the fallback to use")
    reason = db.dropped.get(op)
    detail = f"{op} is not an operator of {torch} (paired with torch_npu {db.version})"
    return Resolution(op, db.version, "unsupported", (), "fails at run time", detail + (f"; yaml: {reason}" if reason else ""))


def resolve(op: str, version: str | None = None, *, children: Iterable[str] | None = None, call: CallLike | None = None,
            chip: str | None = None, cann: str | None = None) -> Resolution:
    """Status of one overload ('aten::add.Tensor', 'aten::mm', 'npu::npu_rms_norm') on a torch_npu release.

    children: the aten ops the caller saw under this op (its observed decomposition). For a composite they are
    resolved too (Resolution.children, .all_children_native) and the detail names those that do not run on the NPU.
    call / chip / cann: the recorded call (OpCall or ReportedCall), the target chip profile name (mappings/hardware.yaml)
    and the CANN version: with any of them, a native kernel's recorded conditions are evaluated (cpu-path,
    conditional or native). Raises NpuportError for a malformed name or a release with no checked-in data.
    """
    name = normalize_op(op)
    db = load(version)
    ns = namespace(name)
    if ns == "aten":
        result = _aten(name, db)
    elif ns == "npu":
        entry = db.custom.get(name)
        if entry is not None:
            result = Resolution(name, db.version, "npu-custom", entry.paths, ACL_ONLY_RISK if entry.paths == ("acl_op",) else None,
                                f"torch_npu {db.version} defines {name} ({', '.join(entry.paths)})")
        else:
            result = Resolution(name, db.version, "unsupported", (), "fails at run time",
                                f"torch_npu {db.version} does not define {name}")
    else:
        result = _other_namespace(name, ns, db)
    if children is not None and result.status == "composite":
        result = _with_children(result, children, db.version)
    if (call is not None or chip is not None or cann is not None) and result.status == "native":
        release = _release(version, db)
        entries = _entries(name, db, release)
        if entries:
            result = _conditioned(result, evaluate(entries, call, chip, cann, name, release), db, release, chip)
    return result


def _release(version: str | None, db: CoverageDB) -> str:
    """The release whose kernels the conditions were read for: the one asked for, as the conditions name it ('2.14'
    and '2.12.0post2' name 2.14.0 and 2.12.0.post2); a release that only shares another's registration data has its
    own kernels (read, carried or unknown), and a version with no data of its own has none."""
    if version is None:
        return db.version
    text = str(version).strip()
    return resolve_version(text).release or text


def _entries(op: str, db: CoverageDB, release: str) -> tuple[ConditionEntry, ...]:
    """The conditions of op's own kernel, or of the out= kernel a structured functional runs through."""
    own = conditions_for(op, release)
    if own or op in db.native:
        return own
    out = db.delegates.get(op)
    return conditions_for(out, release) if out else ()


def has_conditions(op: str, version: str | None = None) -> bool:
    """Whether a registered kernel of op has a recorded conditional host path on this release."""
    db = load(version)
    return bool(_entries(normalize_op(op), db, _release(version, db)))


@dataclass(frozen=True)
class HostPath:
    """One recorded conditional host path of a registered kernel on one release, not evaluated (`coverage show`)."""

    id: str  # the conditions.yaml entry
    outcome: str  # cpu-path | conditional
    condition: str  # when the kernel computes on the host
    sources: tuple[str, ...]  # op-plugin path:lines@commit the condition was read at
    inferred_from: str | None  # set where this release's source was not read: the release it is carried from
    evidence: str  # "read at <sources>", or the carried note: inferred, not verified


def host_paths(op: str, version: str | None = None) -> tuple[HostPath, ...]:
    """The conditional host paths recorded for op's kernel (or its out= kernel) on a release, whatever the call."""
    name = normalize_op(op)
    if resolve(name, version).status != "native":
        return ()
    db = load(version)
    release = _release(version, db)
    out = []
    for e in _entries(name, db, release):
        note = e.inferred(release)
        sources = e.sources_for(release) or e.unreleased
        out.append(HostPath(e.id, e.outcome, e.text(), sources, e.carried.get(release) if note else None,
                            note or f"read at {', '.join(sources)}"))
    return tuple(out)


def _conditioned(res: Resolution, verdict: Verdict, db: CoverageDB, release: str, chip: str | None) -> Resolution:
    sources = tuple(dict.fromkeys(s for e in verdict.entries for s in e.sources_for(release) or e.unreleased))
    res = replace(res, inferred_from=verdict.inferred_from)
    aclnn = sorted({e.aclnn for e in verdict.entries if e.aclnn})
    also = f" (it also does when the CANN install lacks {', '.join(aclnn)})" if aclnn else ""
    where = f" on {chip}" if chip else ""
    if verdict.outcome == "cpu-path":
        risk = ("runs on the host CPU inside torch_npu's own kernel (not the backend fallback"
                + (f"; {db.fallback_error_env}=1 stops only the paths torch_npu gates" if db.fallback_error_env else
                   "; this release has no switch to make it an error") + ")")
        return replace(res, status="cpu-path", risk=risk, condition=verdict.condition, sources=sources,
                       detail=f"{res.detail}, but the kernel computes on the host CPU{where}: {verdict.condition}{also}")
    if verdict.outcome == "conditional":
        return replace(res, status="conditional", risk="may run on the host CPU", condition=verdict.condition,
                       sources=sources,
                       detail=f"{res.detail}; the kernel computes on the host CPU when {verdict.condition}, which "
                              f"npuport cannot decide for this call{where}{also}")
    text = " or ".join(e.text() for e in verdict.entries) + (f" [{verdict.note}]" if verdict.note else "")
    return replace(res, sources=sources, detail=f"{res.detail}; the kernel's host path ({text}) is not taken{where}{also}")


@dataclass(frozen=True)
class CallsResolution:
    """An op over all its recorded calls: the worst status (cpu-path > conditional > native) and which calls got which."""

    resolution: Resolution
    by_status: dict[str, list[CallLike]]


def resolve_calls(op: str, version: str | None, calls: Sequence[CallLike], *, chip: str | None = None,
                  cann: str | None = None) -> CallsResolution:
    """resolve() per recorded call of one op, folded: the audit's coverage stage reports an op once."""
    base = resolve(op, version)
    if base.status != "native" or not has_conditions(op, version):
        return CallsResolution(base, {base.status: list(calls)})
    groups: dict[str, list[CallLike]] = {}
    first: dict[str, Resolution] = {}
    for c in calls or [None]:  # type: ignore[list-item]  # no call: chip and CANN alone
        r = resolve(op, version, call=c, chip=chip, cann=cann)
        groups.setdefault(r.status, []).append(c)
        first.setdefault(r.status, r)
    worst = next(s for s in ("cpu-path", "conditional", "native") if s in first)
    res = first[worst]
    n = sum(len(v) for v in groups.values())
    if len(groups) > 1 and calls:
        res = replace(res, detail=f"{res.detail} ({len(groups[worst])} of {n} calls)")
    return CallsResolution(res, {k: [c for c in v if c is not None] for k, v in groups.items()})


def _other_namespace(name: str, ns: str, db: CoverageDB) -> Resolution:
    """An op of another library (fsdp::, torchvision::, vllm::): what the library registered for it in the traced
    environment decides. A PrivateUse1 kernel runs on the NPU (torch registers FSDP2's fsdp:: copies for it); a
    composite kernel decomposes into aten ops; a CPU kernel alone goes through torch_npu's CPU fallback; nothing is
    an error at run time."""
    import torch  # noqa: PLC0415 - only for ops outside aten / npu: `coverage` commands must start without torch

    def has(key: str) -> bool:
        try:
            return bool(torch._C._dispatch_has_kernel_for_dispatch_key(name, key))
        except RuntimeError:  # not an operator of the traced environment
            return False

    here = f"in the traced environment (torch {torch.__version__})"
    if has("PrivateUse1"):
        return Resolution(name, db.version, "native", ("PrivateUse1",), None,
                          f"{ns}:: registers {name} for PrivateUse1 (the NPU's dispatch key) itself {here}")
    for key, kind in (("CompositeImplicitAutograd", "implicit"), ("CompositeExplicitAutograd", "explicit")):
        if has(key):
            return Resolution(name, db.version, "composite", (), None,
                              f"{ns}:: registers {name} as {key} {here}: it runs as the ops it calls", kind)
    if has("CPU"):
        return Resolution(name, db.version, "cpu-fallback", (), _fallback_risk(db),
                          f"{ns}:: registers {name} for CPU only {here}: torch_npu's fallback copies its tensors to "
                          "the host and back")
    if ns == "higher_order":  # torch runs its higher-order operators itself, per device type (FlexAttention: NPB076)
        return Resolution(name, db.version, "unsupported", (), "fails at run time",
                          f"{name} is a higher-order operator torch runs itself on the devices it accepts; torch "
                          f"{torch.__version__} refuses NPU tensors for it (behaviour rule NPB076 gives the fused "
                          "replacement)")
    return Resolution(name, db.version, "unsupported", (), "fails at run time",
                      f"{name} has no NPU, composite or CPU kernel {here}")


def resolve_composite_children(op: str, children: Iterable[str], version: str | None = None) -> Resolution:
    """resolve(op, version, children=children): a composite plus whether its observed decomposition is all native."""
    return resolve(op, version, children=children)


def _with_children(result: Resolution, children: Iterable[str], version: str) -> Resolution:
    resolved = tuple(resolve(c, version) for c in dict.fromkeys(children))
    if not resolved:
        return result
    off = [f"{c.op} ({c.status})" for c in resolved if c.status not in RUNS_ON_NPU]
    tail = "all of its observed ops run on the NPU" if not off else "not on the NPU: " + ", ".join(off)
    return replace(result, children=resolved, detail=f"{result.detail}; {tail}")


def native_composites(version: str | None = None) -> frozenset[str]:
    """CompositeImplicitAutograd overloads torch_npu registers itself (at AutogradPrivateUse1): report as one NPU op."""
    return load(version).native_composites


def custom_op_schema(name: str, version: str | None = None) -> str | None:
    """'npu::npu_rms_norm' -> 'npu::npu_rms_norm(Tensor self, Tensor gamma, float epsilon=1e-06) -> (Tensor, Tensor)'."""
    op = normalize_op(name if "::" in name else f"npu::{name}")
    entry = load(version).custom.get(op)
    return f"npu::{entry.schema}" if entry else None


def resolve_all(version: str | None = None) -> dict[str, Resolution]:
    """Every aten overload of the paired torch and every npu:: op of one release, resolved (sorted by name)."""
    db = load(version)
    ops = sorted(db.aten_ops() | frozenset(db.custom))
    return {op: resolve(op, db.version) for op in ops}


def earliest_without_fallback(ops: Iterable[str]) -> str | None:
    """The earliest-built release (release candidates aside) on which none of `ops` is cpu-fallback or unsupported
    (None if there is none): by build date, not version number (2.1.0.post10, built 2025-01, is later than 2.3.1)."""
    wanted = list(dict.fromkeys(ops))
    return earliest_by_build_date(
        lambda version: all(resolve(op, version).status not in ("cpu-fallback", "unsupported") for op in wanted))
