"""The audit as a format-neutral document, built from its JSON form: the answer first (will it run, what computes
differently, the top actions, step time against the CUDA chip it comes from), then every section the JSON carries
as titled tables. The text, markdown and HTML renderers all format this one document, so every format carries
the same content; only how much of a long table the terminal shows differs (`Table.limit`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from npuport.render.answers import IMPACTS, RESTATES_COVERAGE, answers, by_impact, leaving_ops, unsupported_ops
from npuport.render.fmt import fmt_bytes, fmt_count, fmt_share, fmt_si, fmt_time, short_kernel_name, short_source
from npuport.render.table import Column, Table

MAX_ACTIONS = 5


@dataclass
class Section:
    id: str
    title: str
    lines: list[str] = field(default_factory=list)
    items_title: str = ""
    items: list[str] = field(default_factory=list)  # a numbered list after the lines (the top actions)
    tables: list[Table] = field(default_factory=list)
    after: list[str] = field(default_factory=list)  # lines after the tables
    details: list[Table] = field(default_factory=list)  # the full detail: markdown and HTML only (the terminal points there)
    hints: list[str] = field(default_factory=list)  # terminal only: where the rest is


@dataclass
class Action:
    """One thing to do, ranked: risk tier first (0 blocks or breaks, 1 runs differently, 2 performance), then the
    share of its scenario's estimated time it touches."""

    tier: int
    share: float
    what: str
    where: str
    fix: str

    def line(self) -> str:
        return f"{self.what}" + (f" at {self.where}" if self.where else "") + f": {self.fix}"


def _at(module: str | None, source: str | None) -> str:
    """Where an action applies, as short as a person can find it: file:line, else the module path."""
    return short_source(source) if source else (module or "")


def _where(module: str | None, source: str | None) -> str:
    parts = [module or ""]
    if source:
        parts.append(short_source(source))
    return " @ ".join(p for p in parts if p) or "(root)"


def _stages(data: dict[str, Any]) -> int:
    """pp of a pipeline-parallel layout (the communication stage divides the traced step by it), else 1."""
    for s in data["scenarios"]:
        for b in ((s.get("communication") or {}).get("by_chip") or {}).values():
            return int(b.get("pipeline_stages") or 1)
    return 1


def host_line(data: dict[str, Any]) -> str | None:
    """With --host-probe every chip's eager step times are for the user's host (the NPU's server taken as fast): the
    line under each table that says so."""
    hp = data.get("host_probe")
    if not hp:
        return None
    fit = f", fit at {hp['reference_probe_s'] * 1e6:.1f} µs" if hp.get("reference_probe_s") else ""
    return (f"host: every chip's times are for this host ({hp['probe_s'] * 1e6:.1f} µs per tiny eager op, "
            f"--host-probe{fit}); the NPU's server taken as fast as this one (no NPU host probe)")


def pipeline_line(data: dict[str, Any]) -> str | None:
    """With pp>1 the step times of the scenario tables are the whole model the rank traced, and the communication's
    are a stage's: the line under each whole-model table that says which is which."""
    pp = _stages(data)
    if pp <= 1:
        return None
    walls = []
    for s in data["scenarios"]:
        b = ((s.get("communication") or {}).get("by_chip") or {}).get(data["chip"])
        if b and b.get("wall_s") is not None:
            walls.append(f"{s['name']} {fmt_time(b['wall_s'])}")
    stage = f": {', '.join(walls)} on {data['chip']}, the Communication table's wall" if walls else ""
    return f"times above are the whole model the rank traced (every layer); a pipeline stage of pp={pp} runs about 1/{pp} of it{stage}"


def _scenario_times(data: dict[str, Any]) -> dict[str, float]:
    return {s["name"]: s["estimated_time_s"] or 0.0 for s in data["scenarios"]}


def actions(data: dict[str, Any]) -> list[Action]:
    """Every action the JSON supports, best first: unsupported ops and error findings, CPU fallbacks and
    warnings, then fusions by the share of step time they save."""
    out: list[Action] = []
    cov = data.get("coverage") or {}
    # an error finding that says why an op cannot run and what replaces it (FlexAttention: NPB076) gives the fix; no
    # torch_npu release has such an op, so "pick a release" would send the user the wrong way
    why = {e["op"]: g for g in data.get("findings") or [] if g["level"] == "error" and g["id"] not in RESTATES_COVERAGE
           for e in g["evidence"]}
    for f in unsupported_ops(cov):
        where = _at(f["modules"][0] if f["modules"] else "", f["sources"][0] if f["sources"] else None)
        g = why.get(f["op"])
        out.append(Action(0, 1.0, f"{f['op']} has no kernel in torch_npu {cov['version']} (fails at run time)", where,
                          f"{g['id']}: {g['fix']}" if g else "replace the op, or pick a release that has it (see Coverage)"))
    for f in leaving_ops(cov):
        where = _at(f["modules"][0] if f["modules"] else "", f["sources"][0] if f["sources"] else None)
        share = max((o["time_share"] for o in data["ops"] if o["op"] == f["op"]), default=0.0)
        fix = (f"avoid what sends torch_npu's kernel to the host ({f['condition']}), or use another op"
               if f["status"] == "cpu-path" else "use an op torch_npu runs natively, or a release without the fallback")
        out.append(Action(1, share, f"{f['op']} runs on the host CPU ({f['calls']} calls, "
                                    f"{fmt_time(f['estimated_transfer_s'])} of transfers)", where, fix))
    for f in cov.get("conditional", []):
        share = max((o["time_share"] for o in data["ops"] if o["op"] == f["op"]), default=0.0)
        where = _at(f["modules"][0] if f["modules"] else "", f["sources"][0] if f["sources"] else None)
        out.append(Action(1, share, f"{f['op']} may run on the host CPU ({f['calls']} calls)", where,
                          f"check on the machine: the kernel goes to the host when {f['condition']}"))
    unsupported = {f["op"] for f in unsupported_ops(cov)}
    for f in data.get("findings") or []:
        if f["level"] == "info" or (f["evidence"] and all(e["op"] in unsupported for e in f["evidence"])):
            continue  # an unsupported op is its own action above
        ev = f["evidence"][0] if f["evidence"] else {}
        # a slow path (impact performance) ranks with the other time savings, by the share it touches
        tier = 0 if f["level"] == "error" else 2 if f.get("impact") == "performance" else 1
        out.append(Action(tier, f.get("time_share") or 0.0, f"{f['id']} {f['title']}",
                          _at(ev.get("module"), ev.get("source")) if ev else "", f["fix"]))
    out += _fusion_actions(data)
    out += graph_actions(data)
    return sorted(out, key=lambda a: (a.tier, -a.share))


def graph_actions(data: dict[str, Any]) -> list[Action]:
    """The scenarios whose eager step waits on the host (one Python dispatch per op outruns the device) and what
    capturing each as one graph would give: the same calls with no host cost per op (npuport/cost/timing.py). One
    action per way of capturing (an NPU training step has no graph class), the scenarios side by side. A step that
    reads values on the host (its syncs: `.item()`, `nonzero`, routing counts) cannot be captured as it is: the action
    says so, per scenario."""
    by_how: dict[str, list[tuple[str, float, float, int]]] = {}
    pp = _stages(data)  # a pipeline stage runs about 1/pp of the traced step: the action is the stage's
    for sc in data["scenarios"]:
        step = sc.get("step") or {}
        graph = step.get("as_graph")
        if graph and step.get("step_s") and graph["step_s"] < step["step_s"]:
            by_how.setdefault(graph["how"], []).append((sc["name"], step["step_s"], graph["step_s"], step.get("syncs") or 0))
    out = []
    for how, rows in by_how.items():
        names = " and ".join(r[0] for r in rows)
        steps = ", ".join(f"{n} {fmt_time(t / pp)} -> {fmt_time(g / pp)}" + _once_syncs_gone(k) for n, t, g, k in rows)
        share = max(1 - g / t for _, t, g, _ in rows)
        stage = f", per pipeline stage of pp={pp}" if pp > 1 else ""
        out.append(Action(2, share, f"{names} {'is' if len(rows) == 1 else 'are'} host-bound", "",
                          f"as a graph ({how}){stage}: {steps}"))
    return out


def _once_syncs_gone(syncs: int) -> str:
    """A step that reads values on the host cannot be captured with those reads in it."""
    return f" once its {syncs} host sync{'s' if syncs > 1 else ''} {'are' if syncs > 1 else 'is'} gone" if syncs else ""


def _fusion_actions(data: dict[str, Any]) -> list[Action]:
    """One action per fusion and code site (where a person makes the change), in the scenario where it saves the
    largest share. The rows of one site in different modules are one change (a norm's forward at one line serves the
    post-attention norm of every layer and the next layer's input norm): their matches and savings add up, so the
    list does not show the same line twice."""
    times = _scenario_times(data)
    sites: dict[tuple[str, str, str], dict[str, list[Any]]] = {}  # (pattern, replacement, where) -> scenario -> sums
    for r in data.get("fusions") or []:
        if r["status"] != "proposed" or not r["replacement"] or not r["time_saved_s"]:
            continue
        where = _at(r["module"], r["sources"][0] if r["sources"] else None)
        per = sites.setdefault((r["pattern"], r["replacement"]["op"], where), {})
        got = per.setdefault(r["scenario"], [0, 0.0, False])  # matches, seconds saved, any after a model change
        got[0] += r["matches"]
        got[1] += r["time_saved_s"]
        got[2] = got[2] or bool(r["note"])
    out = []
    for (pattern, replacement, where), per in sites.items():
        shares = {sc: (s[1] / times[sc] if times.get(sc) else 0.0) for sc, s in per.items()}
        scenario = max(per, key=lambda sc: (shares[sc], sc))
        matches, saved, changed = per[scenario]
        fix = f"saves {fmt_time(saved)} per {scenario} step ({fmt_share(shares[scenario])})"
        if changed:
            fix += ", after a model change (see Fusion opportunities)"
        out.append(Action(2, shares[scenario], f"fuse {pattern} x{matches} into {replacement}", where, fix))
    return out


def _finding_phrase(f: dict[str, Any]) -> str:
    """'NPB051 topk(sorted=False) is not supported (348 calls at modeling_deepseek_v3.py:151)'."""
    ev = f["evidence"][0] if f["evidence"] else {}
    at = _at(ev.get("module"), ev.get("source")) if ev else ""
    return f"{f['id']} {f['title']} ({f['calls']} calls" + (f" at {at}" if at else "") + ")"


def _runs_line(data: dict[str, Any]) -> str:
    """Will it run: an op with no kernel or a finding whose impact is a crash says no (named), a crash warning says
    at risk, CPU fallbacks say yes with their transfer cost."""
    cov = data.get("coverage")
    if not cov:
        return f"Runs on the target? not checked: {data['chip']} is not an NPU (use --torch-npu to check a release)"
    runs = answers(data)["runs"]
    findings = {f["id"]: f for f in data.get("findings") or []}
    by = cov["by_status"]
    n = sum(v["ops"] for v in by.values())
    counts = ", ".join(f"{v['ops']} {k}" for k, v in by.items())
    maybe = cov.get("conditional") or []
    unless = (f"; {len(maybe)} op(s) may compute on the host ({', '.join(f['op'] for f in maybe[:3])}: see Coverage)"
              if maybe else "")
    notes = runs["crash_notes"]
    noted = f"; note{'s' if len(notes) > 1 else ''}: {', '.join(notes)} (see Behaviour differences)" if notes else ""
    head = f"Runs on torch_npu {cov['version']}? "
    if runs["answer"] == "yes":
        return head + f"yes, all {n} compute ops ({counts}){unless}{noted}"
    parts = []
    unsupported = runs["unsupported_ops"]
    if unsupported:
        parts.append(f"{len(unsupported)} op(s) have no NPU kernel and fail at run time ({', '.join(unsupported[:3])})")
    failing = runs["failing_findings"]
    parts += [_finding_phrase(findings[i]) for i in failing[:3]]
    if len(failing) > 3:
        parts.append(f"{len(failing) - 3} more failing finding(s)")
    at_risk = runs["at_risk_findings"]
    if at_risk:
        parts.append("may fail: " + "; ".join(_finding_phrase(findings[i]) for i in at_risk[:3])
                     + (f"; {len(at_risk) - 3} more" if len(at_risk) > 3 else ""))
    fallback = leaving_ops(cov)
    if fallback:
        t = sum(f["estimated_transfer_s"] for f in fallback)
        parts.append(f"{len(fallback)} op(s) fall back to the CPU ({', '.join(f['op'] for f in fallback[:3])}; "
                     f"{fmt_time(t)} of host transfers per step, not in the step time)")
    if not unsupported:  # the failure is in how the ops are called, not in a missing kernel
        parts.append(f"all {n} compute ops have an NPU kernel ({counts})")
    verdict = {"no": "NO", "at-risk": "at risk", "with-cpu-fallbacks": "yes, with CPU fallbacks"}[runs["answer"]]
    earliest = cov.get("earliest_without_fallback")
    tail = f"; earliest checked-in release without: {earliest}" if earliest and (unsupported or fallback) else ""
    return head + f"{verdict}: " + "; ".join(parts) + tail + unless + noted


def _tally_line(question: str, tally: dict[str, Any]) -> str:
    ids = tally["findings"]
    head = f"{question}? {tally['error']} error(s), {tally['warning']} warning(s), {tally['info']} note(s)"
    return head + (f": {', '.join(ids[:3])}{', ...' if len(ids) > 3 else ''}" if ids else "")


def _differs_line(data: dict[str, Any]) -> str:
    """Findings about numerics only: a crash answers "Runs?", a slow path the performance line."""
    tally = answers(data)["computes_differently"]
    if tally is None:
        return "Computes differently? not checked: behaviour rules describe NPU targets"
    return _tally_line("Computes differently", tally)


def _slow_line(data: dict[str, Any]) -> str | None:
    """Findings about performance (work sent to AICPU or the host, serialised kernels), next to the numeric ones
    but counted apart; no line when there are none."""
    tally = answers(data)["slow_paths"]
    if tally is None or not tally["findings"]:  # none: the step time above says the rest
        return None
    return _tally_line(f"Slow paths on {data['chip']}", tally)


def _gib(n: int | None) -> str:
    return "-" if n is None else fmt_bytes(n)


def _fits_line(data: dict[str, Any]) -> str | None:
    fits, over = [], []
    usable = None
    for s in data["scenarios"]:
        mem = s.get("memory")
        row = next((f for f in (mem or {}).get("fit", []) if f["chip"] == data["chip"]), None)
        if mem is None or row is None or row["fits"] is None:
            continue
        usable = row["usable_bytes"]
        if row["fits"]:
            fits.append(f"{s['name']} {_gib(mem['peak_bytes'])}")
        else:
            over.append(f"{s['name']} needs {_gib(mem['peak_bytes'])} (over by {_gib(-row['margin_bytes'])})")
    if not fits and not over:
        return None
    head = f"Fits {data['chip']} memory ({_gib(usable)} usable)? "
    if not over:
        return head + "yes, at peak: " + ", ".join(fits)
    return head + "NO: " + "; ".join(over) + ("; fits: " + ", ".join(fits) if fits else "")


def memory_actions(data: dict[str, Any]) -> list[Action]:
    """A scenario over the target's memory: the first single change that fits it; the scenarios no single change fits
    share one action, with the fewest devices that could hold them (their peak over the usable memory: a bound that
    only perfect sharding of every byte reaches)."""
    out = []
    stuck: list[tuple[str, int, int]] = []  # (scenario, peak bytes, usable bytes)
    for s in data["scenarios"]:
        mem = s.get("memory")
        row = next((f for f in (mem or {}).get("fit", []) if f["chip"] == data["chip"]), None)
        if not mem or row is None or row["fits"] is not False:
            continue
        fix = next((c for c in mem["changes"] if c.get("fits")), None)
        if fix is None:
            stuck.append((s["name"], mem["peak_bytes"], row["usable_bytes"]))
            continue
        how = (f"{fix['change']} ({_gib(fix['peak_bytes'])}" + (f", +{fmt_time(fix['extra_time_s'])} per step" if fix["extra_time_s"] else "")
               + ")")
        out.append(Action(0, 1.0, f"the {s['name']} step needs {_gib(mem['peak_bytes'])}, {_gib(row['usable_bytes'])} usable",
                          "", how))
    if stuck:
        names = ", ".join(n for n, _, _ in stuck[:-1]) + (" and " if len(stuck) > 1 else "") + stuck[-1][0]
        usable = stuck[0][2]
        needs = " / ".join(_gib(peak) for _, peak, _ in stuck)
        devices = " / ".join(str(-(-peak // usable)) if usable else "?" for _, peak, usable in stuck)
        out.append(Action(0, 1.0, f"the {names} step{'s' if len(stuck) > 1 else ''} need{'' if len(stuck) > 1 else 's'} "
                                  f"{needs}, {_gib(usable)} usable", "",
                          f"no single change found (see Memory); even with every byte sharded evenly: at least {devices} "
                          "devices"))  # over the usable memory: always 2 or more
    return out


def _comm_line(data: dict[str, Any]) -> str | None:
    """One rank's communication against its compute, per scenario, on the target."""
    dist = data.get("distributed")
    if not dist:
        return None
    parts = []
    for s in data["scenarios"]:
        b = (s.get("communication") or {}).get("by_chip", {}).get(data["chip"])
        if not b or not b["communication_s"]:
            continue
        wall = b.get("wall_s")
        stage = f" of a pp={b['pipeline_stages']} stage" if b.get("pipeline_stages") else ""
        within = (f"{'fits within' if b['hidden'] else 'does not fit within'} the {fmt_time(wall)} step{stage}, "
                  f"{fmt_time(b['compute_s'])} of it device compute" if wall is not None else
                  f"{'hides behind' if b['hidden'] else 'does not fit behind'} {fmt_time(b['compute_s'])} of compute")
        added = b.get("added_s", b["exposed_s"])
        parts.append(f"{s['name']} {fmt_time(b['communication_s'])} of communication ({within}; "
                     f"{fmt_time(b['exposed_s'])} exposed, the step {'+' + fmt_time(added) if added else 'unchanged'})")
    head = f"Rank {dist['rank']} of {dist['world_size']}" + (f" ({dist['layout']})" if dist.get("layout") else "")
    whole = dist.get("unsharded") or []  # what the tensor-parallel plan leaves whole on every rank
    if whole:
        parts.append(f"tensor parallel leaves {_gib(sum(r['bytes'] for r in whole))} "
                     f"({sum(r['share'] for r in whole):.0%}) of the weights whole on every rank: "
                     + ", ".join(r["module"] for r in whole[:3]) + (", ..." if len(whole) > 3 else ""))
    return f"{head}: " + ("; ".join(parts) if parts else "no collective traced")


def comm_actions(data: dict[str, Any]) -> list[Action]:
    """Collectives HCCL rejects (tier 0) or runs another way (tier 1), and communication that does not hide (2)."""
    out: list[Action] = []
    seen: set[tuple[str, str]] = set()
    for s in data["scenarios"]:
        comm = s.get("communication") or {}
        for r in comm.get("collectives", []):
            h = r.get("hccl") or {}
            key = (r["op"], h.get("status", ""))
            if h.get("status") in ("raises", "absent", "emulated") and key not in seen:
                seen.add(key)
                tier = 1 if h["status"] == "emulated" else 0
                what = f"{r['kind']} ({r['op']}, {r['dtype']}" + (f", {r['reduce_op']}" if r.get("reduce_op") else "") + ")"
                out.append(Action(tier, 1.0, f"HCCL {h['status']}: {what}", _at(r["module"], (r["sources"] or [None])[0]),
                                  h.get("note") or "see docs/scale-out-hccl.md"))
        b = comm.get("by_chip", {}).get(data["chip"])
        if b and b["step_s"] and not b["hidden"]:
            share = (b["overlappable_s"] - b["compute_s"]) / b["step_s"]
            # the suggestions that fit this layout (npuport.audit.comm_stage.to_hide: ZeRO-2 only where ZeRO-3 re-gathers)
            hide = b.get("to_hide") or []
            out.append(Action(2, share, f"{s['name']}: communication does not fit behind compute on {data['chip']}",
                              "", f"{fmt_time(b['overlappable_s'])} to overlap against {fmt_time(b['compute_s'])} of "
                                  "compute" + (": " + "; ".join(hide) if hide else "")))
    return out


def summary(data: dict[str, Any]) -> Section:
    """The first screen: at most about 25 lines that answer the migration questions."""
    m = data["model"]
    npu = f", torch_npu {data['coverage']['version']}" if data.get("coverage") else ""
    sec = Section("summary", f"npuport audit: {m['name']} ({m['parameters'] / 1e9:.3g} B parameters, {m['dtype']}) "
                             f"on {data['chip']}{npu}")
    sec.lines.append(_runs_line(data))
    fits = _fits_line(data)
    if fits:
        sec.lines.append(fits)
    sec.lines.append(_differs_line(data))
    slow = _slow_line(data)
    if slow:
        sec.lines.append(slow)
    for f in data.get("failed_scenarios", []):
        sec.lines.append(f"Scenario {f['name']} could not be traced: {f['reason']}")
    comm = _comm_line(data)
    if comm:
        sec.lines.append(comm)
    acts = memory_actions(data) + comm_actions(data) + actions(data)
    if acts:
        more = f"; {len(acts) - MAX_ACTIONS} more below" if len(acts) > MAX_ACTIONS else ""
        sec.items_title = f"Top actions (risk first, then estimated time saved on {data['chip']}{more}):"
        sec.items = [a.line() for a in acts[:MAX_ACTIONS]]
    else:
        sec.lines.append("Top actions: none: no blocker, no behaviour warning, no fusion that saves time")
    sec.tables.append(step_time_table(data))
    for line in (pipeline_line(data), host_line(data)):
        if line:
            sec.after.append(line)
    return sec


def step_time_table(data: dict[str, Any]) -> Table:
    names = [s["name"] for s in data["scenarios"]]
    target, base = data["chip"], data.get("baseline_chip")
    mode = {s.get("step", {}).get("mode", "eager") for s in data["scenarios"]}
    cols = [Column(f"step time ({'/'.join(sorted(mode))})")] + [Column(n, "right") for n in names]
    rows = [[f"{target} (target)"] + [fmt_time(s["estimated_time_s_by_chip"][target]) for s in data["scenarios"]]]
    if base and base != target and all(base in s["estimated_time_s_by_chip"] for s in data["scenarios"]):
        rows.append([f"{base} (from)"] + [fmt_time(s["estimated_time_s_by_chip"][base]) for s in data["scenarios"]])
        ratios = []
        for s in data["scenarios"]:
            b = s["estimated_time_s_by_chip"][base]
            ratios.append(f"{s['estimated_time_s_by_chip'][target] / b:.2f}x" if b else "-")
        rows.append([f"{target} / {base}"] + ratios)
    return Table("step_time", "", cols, rows)


def scenarios_section(data: dict[str, Any]) -> Section:
    sec = Section("scenarios", "Scenarios")
    cols = [Column("scenario"), Column("shape"), Column("compute calls", "right"), Column("FLOPs", "right"),
            Column("bytes", "right"), Column("device time", "right"), Column("host time", "right", priority=1),
            Column("bound", priority=1), Column("roofline bound", "right", priority=2)]
    rows = []
    for s in data["scenarios"]:
        shape = f"batch {s['batch']} x {s['seq']} tokens" + (", forward + backward" if s["kind"] == "train" else "")
        if s["past"]:
            shape += (f", no cache: re-runs the {s['past'] + s['seq']}-token context" if s.get("recompute")
                      else f", cache of {s['past']} tokens")
        device = s["estimated_time_s"]
        step = s.get("step") or {}
        if step.get("mode") in ("compile", "reduce-overhead"):  # its ops as torch.compile launches them: fewer kernels, less traffic
            shape += f", compiled: {fmt_count(step['kernels'])} kernels"
            device = step["device_s"]
        rows.append([s["name"], shape, fmt_count(s["compute_calls"]), fmt_si(s["flops"], "FLOP"), fmt_si(s["bytes"], "B"),
                     fmt_time(device), fmt_time(s["step"]["host_s"]) if "step" in s else "-",
                     s["step"]["bound"] if "step" in s else "-",
                     fmt_time(s["roofline_time_s"]) if "roofline_time_s" in s else "-"])
    for f in data.get("failed_scenarios", []):
        rows.append([f["name"], f"could not be traced: {f['reason']}", "", "", "", "", "", "", ""])
    sec.tables.append(Table("scenarios", "", cols, rows))
    whole = pipeline_line(data)
    if whole:
        sec.after.append(whole)
    return sec


def _shape_variation(op: dict[str, Any]) -> str:
    parts = []
    for name, sc in op["scenarios"].items():
        top = " ".join(sc["shapes"][0]["inputs"].split()[:3]) if sc["shapes"] else "-"
        more = f" +{sc['distinct_shapes'] - 1}" if sc["distinct_shapes"] > 1 else ""
        parts.append(f"{name}: {top}{more}")
    return "\n".join(parts)


def _bound_letter(b: str) -> str:
    return {"compute": "C", "memory": "M"}.get(b, "-")


def inventory_section(data: dict[str, Any], top: int = 30, show_views: bool = False) -> Section:
    names = [s["name"] for s in data["scenarios"]]
    ops = [o for o in data["ops"] if show_views or o["kind"] == "compute"]
    has_cov = any("coverage" in o for o in ops)
    cols = [Column("op", kind="code"), Column("class", kind="class"), Column("mean share", "right")]
    cols += [Column(n, "right", priority=2) for n in names]
    cols += [Column("calls", "right"), Column("shapes by scenario (top; +distinct)", priority=5),
             Column("dtype", priority=4), Column("modules", priority=3), Column("fused", priority=6)]
    if has_cov:
        cols.append(Column("NPU impl", kind="status", priority=1))
    rows = []
    for o in ops:
        row = [o["op"], o["class"], fmt_share(o["time_share"])]
        for n in names:
            sc = o["scenarios"].get(n)
            row.append(f"{fmt_share(sc['time_share'])} {_bound_letter(sc['bound'])}" if sc else "")
        mods = o["modules"][:2]
        more = len(o["modules"]) - len(mods)
        where = short_source(o["sources"][0]) if o["sources"] else ""
        row += [fmt_count(o["calls"]), _shape_variation(o), ",".join(o["dtypes"]),
                "\n".join(mods) + (f"\n+{more} more" if more > 0 else "") + (f"\n@ {where}" if where else ""),
                "yes" if o["fused"] else "no"]
        if has_cov:
            cov = o.get("coverage") or {}
            row.append(cov.get("status", "?") + (f" ({'/'.join(cov['paths'])})" if cov.get("paths") else ""))
        rows.append(row)
    sec = Section("inventory", "Operator inventory (by estimated time share, mean over scenarios)")
    sec.tables.append(Table("ops", "", cols, rows, more="{n} more ops"))
    views = [o for o in data["ops"] if o["kind"] == "view"]
    if views:
        sec.details.append(Table("view_ops", "View and metadata ops (no data movement of their own)",
                                 [Column("op", kind="code"), Column("calls", "right"), Column("modules", kind="code")],
                                 [[o["op"], fmt_count(o["calls"]), ", ".join(o["modules"][:4])] for o in views]))
    if views and not show_views:
        sec.after.append(f"{sum(o['calls'] for o in views):,} view/metadata calls of {len(views)} ops not in the table (--show-views)")
    sec.after.append("per scenario: time share and bound (C compute, M memory) on the roofline of " + data["chip"])
    srows = []
    for o in data["ops"]:
        for n, sc in o["scenarios"].items():
            for sh in sc["shapes"]:
                srows.append([o["op"], n, sh["inputs"], fmt_count(sh["calls"]), fmt_time(sh["estimated_time_s"])])
            if sc["distinct_shapes"] > len(sc["shapes"]):
                srows.append([o["op"], n, f"... {sc['distinct_shapes'] - len(sc['shapes'])} more shapes", "", ""])
    sec.details.append(Table("op_shapes", "Input shapes per op and scenario (costliest first)",
                             [Column("op", kind="code"), Column("scenario"), Column("inputs", kind="code"),
                              Column("calls", "right"), Column("estimated time", "right")], srows))
    sec.details.append(Table("op_costs", "FLOPs and bytes per op (all scenarios)",
                             [Column("op", kind="code"), Column("FLOPs", "right"), Column("bytes", "right"),
                              Column("intensity (FLOP/B)", "right"), Column("bound"), Column("module types"),
                              Column("native composite of")],
                             [[o["op"], fmt_si(o["flops"], "FLOP"), fmt_si(o["bytes"], "B"),
                               f"{o['arithmetic_intensity']:.3g}" if o["arithmetic_intensity"] else "-", o["bound"],
                               ", ".join(o["module_types"]), ", ".join(o["native_composite_of"])] for o in ops]))
    flips = [o for o in data["ops"] if o["bound_flips"] and o["class"] != "cold"]
    if flips:
        sec.after.append("bottleneck changes between scenarios:")
        for o in flips:
            b = ", ".join(f"{n} {sc['bound']}" for n, sc in o["scenarios"].items() if sc["bound"] != "none")
            sec.after.append(f"  {o['op']}: {b}")
    return sec


def modules_section(data: dict[str, Any]) -> Section:
    names = [s["name"] for s in data["scenarios"]]
    cols = [Column("module", kind="code"), Column("type", priority=2), Column("mean share", "right")]
    cols += [Column(n, "right", priority=1) for n in names]
    rows = [[me["module"], me["type"], fmt_share(me["time_share"]),
             *[fmt_share(me["scenarios"][n]["time_share"]) if n in me["scenarios"] else "" for n in names]]
            for me in data["modules"]]
    sec = Section("modules", "Modules (layer indices merged)")
    sec.tables.append(Table("modules", "", cols, rows, more="{n} more modules"))
    return sec


def chips_section(data: dict[str, Any]) -> Section:
    names = [s["name"] for s in data["scenarios"]]
    cols = [Column("chip")] + [Column(n, "right") for n in names]
    rows = []
    for chip in data["scenarios"][0]["estimated_time_s_by_chip"] if data["scenarios"] else []:
        mark = " (target)" if chip == data["chip"] else " (from)" if chip == data.get("baseline_chip") else ""
        rows.append([chip + mark] + [fmt_time(s["estimated_time_s_by_chip"][chip]) for s in data["scenarios"]])
    sec = Section("chips", "Estimated step time per chip (device + host; mappings/timing.yaml)")
    sec.tables.append(Table("chips", "", cols, rows))
    for line in (pipeline_line(data), host_line(data)):
        if line:
            sec.after.append(line)
    return sec


def _first_where(f: dict[str, Any]) -> str:
    return (f["modules"][0] if f["modules"] else "") + (f" @ {short_source(f['sources'][0])}" if f["sources"] else "")


def coverage_section(data: dict[str, Any]) -> Section | None:
    cov = data.get("coverage")
    if not cov:
        return None
    sec = Section("coverage", f"Coverage on torch_npu {cov['version']}")
    rows = [[k, str(v["ops"]), fmt_count(int(v["calls"])), fmt_share(v["time_share"])] for k, v in cov["by_status"].items()]
    sec.tables.append(Table("coverage_status", "", [Column("status", kind="status"), Column("ops", "right"),
                                                   Column("calls", "right"), Column("time share", "right")], rows))
    failing = unsupported_ops(cov)
    if failing:
        urows = [[f["op"], str(f["calls"]), _first_where(f), f.get("detail") or ""] for f in failing]
        sec.tables.append(Table("unsupported", f"Ops that fail on torch_npu {cov['version']} (no NPU kernel, no fallback: "
                                               "the run stops at the first call)",
                                [Column("op", kind="code"), Column("calls", "right"), Column("where"),
                                 Column("detail", priority=6)], urows))
    leaving = leaving_ops(cov)
    if leaving:
        switch = (f"set {cov['fallback_error_env']}=1 to make a fallback an error" if cov.get("fallback_error_env")
                  else "this release has no switch to make a fallback an error")
        frows = [[f["op"], f["status"], str(f["calls"]), _first_where(f),
                  fmt_si(f["bytes_crossing_host"], "B"), fmt_time(f["estimated_transfer_s"]), f.get("detail") or ""]
                 for f in leaving]
        sec.tables.append(Table("fallbacks", f"Ops that leave the NPU ({switch})",
                                [Column("op", kind="code"), Column("status", kind="status"), Column("calls", "right"),
                                 Column("where"), Column("bytes host<->device", "right", priority=2),
                                 Column("transfer estimate", "right"), Column("detail", priority=6)], frows))
        sec.after.append("transfer estimates: bytes over the host link per step; not included in the step times")
    if cov.get("conditional"):
        crows = [[f["op"], str(f["calls"]), _first_where(f), f["condition"] or ""] for f in cov["conditional"]]
        sec.tables.append(Table("conditional", "Ops whose torch_npu kernel computes on the host under a condition the "
                                               "trace does not show (mappings/coverage/conditions.yaml)",
                                [Column("op", kind="code"), Column("calls", "right"), Column("where"),
                                 Column("host path when")], crows))
    if cov.get("earliest_without_fallback"):
        sec.after.append(f"earliest-built torch_npu release with no CPU fallback for this model: {cov['earliest_without_fallback']}")
    for version, ops in (cov.get("releases_with_fallback") or {}).items():
        sec.after.append(f"torch_npu {version}: {len(ops)} op(s) leave the NPU or fail: {', '.join(ops[:6])}{' ...' if len(ops) > 6 else ''}")
    sec.after.append("releases checked, oldest-built first until one runs every op on the NPU: "
                     + ", ".join(cov.get("checked_versions", [])))
    return sec


def _finding_share(f: dict[str, Any]) -> str:
    """'25.5% (decode)': the largest share of one scenario's time, with the scenario (from the evidence when the JSON
    predates `time_share_by_scenario`)."""
    if f.get("time_share") is None:
        return ""
    per = f.get("time_share_by_scenario")
    if per is None:
        per = {}
        for e in f["evidence"]:
            per[e["scenario"]] = per.get(e["scenario"], 0.0) + (e.get("time_share") or 0.0)
    top = max(per, key=lambda k: per[k]) if per else None
    return fmt_share(f["time_share"]) + (f"\n({top})" if top else "")  # the scenario under it: a narrow column


def findings_section(data: dict[str, Any]) -> Section | None:
    findings = data.get("findings")
    if findings is None:
        return None
    kinds = {k: len(by_impact(findings, k)) for k in IMPACTS}
    by_kind = ", ".join(f"{n} {k}" for k, n in kinds.items() if n)
    sec = Section("findings", f"Behaviour differences on {data['chip']} ({len(findings)} findings"
                              + (f": {by_kind}" if by_kind else "") + ")")
    # a finding's share is of one scenario's step (its largest), not the inventory's mean over scenarios
    cols = [Column("id"), Column("level", kind="level"), Column("impact", priority=2), Column("title"),
            Column("calls", "right", priority=2), Column("share (largest)", "right", priority=1),
            Column("where", priority=3, essential=True), Column("fix")]
    rows = []
    for f in findings:
        ev = f["evidence"][0] if f["evidence"] else {}
        where = _where(ev.get("module"), ev.get("source")) if ev else ""
        share = _finding_share(f)
        rows.append([f["id"], f["level"], f["impact"], f["title"], str(f["calls"]), share, where, f["fix"]])
    sec.tables.append(Table("findings", "", cols, rows, more="{n} more findings"))
    if findings:
        sec.hints.append("details per finding (message, evidence, source of the fact): --format markdown / html / json")
        sec.details.append(Table("finding_details", "What each finding says and where its fact comes from",
                                 [Column("id"), Column("message"), Column("explanation"), Column("detection"),
                                  Column("source of the fact")],
                                 [[f["id"], f["message"], f.get("explanation") or "", f.get("detection") or "", f["source"]]
                                  for f in findings]))
        ev_rows = []
        for f in findings:
            for ev in f["evidence"]:
                ev_rows.append([f["id"], ev["scenario"], ev["op"], ev["module"] or "(root)", ev.get("module_type") or "",
                                short_source(ev["source"]) if ev.get("source") else "", str(ev["calls"]),
                                fmt_share(ev["time_share"]), ev.get("detail") or ""])
            if f.get("evidence_omitted"):
                ev_rows.append([f["id"], "", "", f"... {f['evidence_omitted']} more places (JSON keeps the first ones)", "", "", "", "", ""])
        sec.details.append(Table("finding_evidence", "Evidence (every recorded place, per finding)",
                                 [Column("id"), Column("scenario"), Column("op", kind="code"), Column("module", kind="code"),
                                  Column("type"), Column("source"), Column("calls", "right"),
                                  Column("share of the scenario", "right"),
                                  Column("detail")], ev_rows))
    return sec


def scan_section(data: dict[str, Any]) -> Section | None:
    scan = data.get("source_scan")
    if not scan:
        return None
    s = scan["summary"]
    sec = Section("source_scan", "CUDA-specific source references (static scan, nothing executed)")
    rows = [[d["id"], f"{short_source(d['file'])}:{d['line']}:{d['col']}", d["message"], d["npu_equivalent"],
             "auto" if d["auto"] else "manual"] for d in scan["diagnostics"]]
    if rows:
        sec.tables.append(Table("diagnostics", "", [Column("id"), Column("location"), Column("message"),
                                                    Column("NPU equivalent", priority=3),
                                                    Column("transfer_to_npu", priority=5)], rows,
                                more="{n} more source references"))
    sec.after.append(f"{s['found']} CUDA reference(s) in {s['files']} file(s): {s['handled_automatically']} handled automatically by "
                     f"transfer_to_npu ({s['automatic_percent']}%), {s['manual']} need a manual change, {s['migratable']} rewritten by `npuport migrate`")
    return sec


def _fusion_why(r: dict[str, Any]) -> str:
    why = r["note"] or ""
    if r["blocked_by"]:
        b = r["blocked_by"][0]
        why = f"{b['tensor']} is also read by {b['other_reader']} ({short_source(b['at'])})"
    elif r["rejected"] and not why:
        why = "; ".join(f"{x['op']}: {', '.join(x['reasons'])}" for x in r["rejected"][:2])
    if r.get("compiled"):  # a torch.compile scenario: what Inductor already makes of the chain
        why = f"{why}; {r['compiled']}" if why else r["compiled"]
    return why


def fusions_section(data: dict[str, Any]) -> Section | None:
    """Every fusion row, the largest saving first as a share of its own scenario's step: the order of the top
    actions, so the first rows the terminal shows are the savings the summary quotes."""
    rows_in = data.get("fusions")
    if not rows_in:
        return None
    times = _scenario_times(data)
    order = {s["name"]: i for i, s in enumerate(data["scenarios"])}

    def share(r: dict[str, Any]) -> float:
        t = times.get(r["scenario"])
        return (r["time_saved_s"] or 0.0) / t if t else 0.0

    ordered = sorted(rows_in, key=lambda r: (-share(r), order.get(r["scenario"], len(order)), r["pattern"], r["module"]))
    cols = [Column("scenario"), Column("pattern (matches)"), Column("status", kind="status"),
            Column("module", kind="code", priority=2, essential=True), Column("replacement", priority=3, essential=True),
            Column("saves per step", "right"), Column("why / blocked by", priority=6)]
    rows = []
    for r in ordered:
        rep = r["replacement"]
        saves = (f"{fmt_time(r['time_saved_s'])} ({fmt_share(share(r))})\n{fmt_si(r['bytes_saved'], 'B')}, "
                 f"{r['launches_saved']} launches" if r["launches_saved"] else "-")
        replacement = "-" if r["status"] == "fused" else rep["op"] if rep else "none fits"
        rows.append([r["scenario"], f"{r['pattern']} x{r['matches']}", r["status"], r["module"], replacement, saves,
                     _fusion_why(r)])
    sec = Section("fusions", f"Fusion opportunities (saving on {data['chip']} per step and as a share of it, roofline "
                             "estimate; largest share first)")
    sec.tables.append(Table("fusions", "", cols, rows, more="{n} more fusion rows"))
    return sec


def routes_section(data: dict[str, Any]) -> Section | None:
    routes = data.get("routes")
    if not routes:
        return None
    w = data.get("route_weights", {})
    sec = Section("routes", "Implementation routes (score 0-10; weights " + ", ".join(f"{k} {v:.0%}" for k, v in w.items()) + ")")
    rows = []
    for r in routes:
        target = r["target"] + (f" @ {r['module']}" if r.get("module") else "")
        cands = ", ".join(f"{c['route']} {c['score']:.1f}" + ("" if c["dimensions"]["coverage"]["score"] > 0 else " (n/a)")
                          for c in r["candidates"])
        rows.append([target, r["recommended"] or "-", cands])
    sec.tables.append(Table("routes", "", [Column("target"), Column("recommended"), Column("candidates (score)")], rows,
                            more="{n} more routes"))
    sec.after.append("performance and coverage are evidence (roofline, coverage data, constraint checks); the other "
                     "dimensions are judgements stated in mappings/routes.yaml")
    dims = list(w)
    drows = []
    for r in routes:
        target = r["target"] + (f" @ {r['module']}" if r.get("module") else "")
        for c in r["candidates"]:
            drows.append([target, c["route"], f"{c['score']:.2f}", *[f"{c['dimensions'][d]['score']:.1f}" if d in c["dimensions"] else ""
                                                                     for d in dims],
                          "; ".join(f"{d}: {c['dimensions'][d]['why']}" for d in ("performance", "coverage") if d in c["dimensions"])])
    sec.details.append(Table("route_scores", "Scores per route and dimension (0-10)",
                             [Column("target"), Column("route"), Column("score", "right")]
                             + [Column(d, "right") for d in dims] + [Column("evidence")], drows))
    return sec


def memory_section(data: dict[str, Any]) -> Section | None:
    scen = [s for s in data["scenarios"] if s.get("memory")]
    if not scen:
        return None
    names = [s["name"] for s in scen]
    optimizer = next((s["memory"].get("optimizer") for s in scen if s["kind"] == "train"), None)
    sec = Section("memory", "Device memory (traced on fake tensors" + (f"; optimizer {optimizer} for training" if optimizer else "")
                  + ")")
    shared = next((s["memory"]["held_share"] for s in scen if s["memory"].get("held_share")), None)
    if shared is not None:  # expert / pipeline parallel estimated: the figures are a rank of the job's, not the trace's
        layout = (data.get("distributed") or {}).get("layout") or "the job"
        sec.lines.append(f"per rank of {layout}: weights, gradients and optimizer states are {shared['params']:.0%} of "
                         "the traced rank's (expert and pipeline parallel are estimated, not traced)"
                         + (f", an inference step's cache {shared['cache']:.0%}"
                            if shared["cache"] != 1.0 and any(s["kind"] != "train" for s in scen) else "")
                         + "; see notes")
    rows_spec = [("weights", "weights_bytes"), ("gradients", "grads_bytes"), ("optimizer states", "optimizer_states_bytes"),
                 ("master weights", "master_weights_bytes"), ("optimizer step temporary", "optimizer_step_temporary_bytes"),
                 ("activations kept for backward", "activations_bytes"), ("inputs (a decode step: its cache)", "inputs_bytes"),
                 ("traced peak (forward / backward)", "traced_peak_bytes"), ("first step's peak", "step0_peak_bytes"),
                 ("peak (the chip must hold this)", "peak_bytes"), ("held between steps", "held_bytes")]
    rows = []
    for label, key in rows_spec:
        vals = [s["memory"].get(key) for s in scen]
        if all(v in (None, 0) for v in vals) and key not in ("peak_bytes", "weights_bytes"):
            continue
        rows.append([label] + [_gib(v) if v is not None else "" for v in vals])
    sec.tables.append(Table("memory", "", [Column("bytes on the device")] + [Column(n, "right") for n in names], rows))
    # where the traced peak falls: a module path, too long for a column of numbers
    sec.lines.append("traced peak at: " + "; ".join(
        f"{s['name']} {s['memory']['traced_peak_phase']} {s['memory']['traced_peak_module'] or ''}".strip() for s in scen))
    chips = [f["chip"] for f in scen[0]["memory"]["fit"]]
    frows = []
    for chip in chips:
        cells = []
        usable = None
        for s in scen:
            f = next(x for x in s["memory"]["fit"] if x["chip"] == chip)
            usable = f["usable_bytes"]
            cells.append(f["verdict"])
        mark = " (target)" if chip == data["chip"] else ""
        frows.append([chip + mark, _gib(usable)] + cells)
    sec.tables.append(Table("memory_fit", "Fit per chip (capacity minus the runtime's reserve)",
                            [Column("chip"), Column("usable", "right")] + [Column(n, priority=1) for n in names], frows))
    crows = [[s["name"], c["change"], _gib(c["peak_bytes"]), "yes" if c.get("fits") else "no",
              fmt_time(c["extra_time_s"]) if c["extra_time_s"] else "-", c["note"]]
             for s in scen for c in s["memory"]["changes"]]
    if crows:
        sec.tables.append(Table("memory_changes", f"What to change to fit {data['chip']}",
                                [Column("scenario"), Column("change"), Column("peak", "right"), Column("fits", kind="status"),
                                 Column("extra time per step", "right", priority=1), Column("note", priority=2)], crows))
    for s in scen:
        by = s["memory"].get("activations_by_module") or {}
        if by:
            sec.details.append(Table(f"activations_{s['name']}", f"Activations kept for backward by module ({s['name']}, "
                                                                  "layer indices merged, innermost modules)",
                                     [Column("module", kind="code"), Column("bytes", "right")],
                                     activation_rows(by, s["memory"].get("activations_bytes"))))
    return sec


ACTIVATIONS_SHOWN = 12  # the rows of activations_by_module the JSON keeps (npuport.cost.memory)


def activation_rows(by: dict[str, int], total: int | None) -> list[list[str]]:
    """The innermost modules' rows, then what they do not cover, so the rows add up to the total: a module's rows
    count only its innermost children, so what a parent module's own code keeps (an attention's SDPA output, an
    MLP's activation) and the model's own code (its loss, its final reshape) is the remainder."""
    rows = [[k, _gib(v)] for k, v in by.items()]
    if total is None:
        return rows
    rest = total - sum(by.values())
    if rest > 0:
        smaller = ", smaller modules" if len(by) >= ACTIVATIONS_SHOWN else ""
        rows.append([f"elsewhere: non-leaf modules{smaller} and the model's own code", _gib(rest)])
    elif rest < 0:  # a module's output that a later op freed before forward returned
        rows.append(["counted above but freed before forward returned", "-" + _gib(-rest)])
    rows.append(["total (activations kept for backward)", _gib(total)])
    return rows


def _ratio(r: float | None) -> str:
    return "-" if r is None else f"{r:.2f}x"


def profile_section(data: dict[str, Any]) -> Section | None:
    """Measured against estimated: one table per joined scenario (npuport.profile.join)."""
    joins = data.get("profile") or []
    if not joins:
        return None
    sec = Section("profile", "Measured against estimated")
    for j in joins:
        sc = j["scenario"]
        if j.get("shape_note"):
            sec.lines.append(f"{sc}: warning: {j['shape_note']}")
        step = j.get("step") or {}
        est, meas = step.get("estimated") or {}, step.get("measured") or {}
        if meas.get("step_s"):
            err = f" ({step['error']:+.0%})" if step.get("error") is not None else ""
            sec.lines.append(f"{sc}: step {fmt_time(meas['step_s'])} measured ({meas.get('step_from')}) against "
                             f"{fmt_time(est.get('step_s', 0.0))} estimated on {data['chip']}{err}; device "
                             f"{fmt_time(meas.get('device_s', 0.0))} measured per step against "
                             f"{fmt_time(est.get('device_s', j['estimated_s']))} estimated"
                             + (f" ({step['device_error']:+.0%})" if step.get("device_error") is not None else "")
                             + (f"; estimated {est['bound']}-bound" if est.get("bound") else ""))
            at = step.get("estimated_at_host")
            if at and step.get("error_at_host") is not None:
                # the host side scales with the recorded host's speed: the same estimate for that host
                sec.lines.append(f"{sc}: for the recorded host (probe {at['probe_s'] * 1e6:.1f} µs per tiny op against "
                                 f"{at['reference_probe_s'] * 1e6:.1f} µs where the host costs were fit): "
                                 f"{fmt_time(at['step_s'])} estimated ({step['error_at_host']:+.0%})")
        comp = j.get("compiled")
        cap = j.get("captured")
        if cap:  # a replay's kernels carry no aten op
            est_k = cap.get("estimated_kernels")
            sec.lines.append(f"{sc}: replayed graph, per step: {cap['kernels']} kernels ({fmt_time(cap['kernels_s'])}) "
                             "measured" + (f" against {est_k} kernels estimated" if est_k else "")
                             + "; a replay's kernels carry no aten op, so no per-op comparison"
                             + (": by kernel class below" if j.get("kernel_classes") else ""))
        elif comp:  # fused across ops: its kernels, not op by op
            est_k = comp.get("estimated_kernels")
            sec.lines.append(f"{sc}: compiled step, per step: {comp['generated']} generated kernels "
                             f"({fmt_time(comp['generated_s'])}) and {comp['library']} library kernels "
                             f"({fmt_time(comp['library_s'])}) measured"
                             + (f" against {est_k} kernels estimated" if est_k else "")
                             + "; its pointwise ops ran fused across op boundaries, so no per-op comparison"
                             + (": by kernel class below" if j.get("kernel_classes") else ""))
        else:
            sec.lines.append(f"{sc}: ops measured {fmt_time(j['measured_s'])} per step on {j['device']} ({j['device_time']}, "
                             f"{j['source']}) against {fmt_time(j['estimated_s'])} estimated on {data['chip']} "
                             f"({_ratio(j['ratio'])}); time-share distance {j['distance']:.3f} (half L1)")
        for st in j.get("steps", [])[:5]:
            sec.lines.append(f"{st['name']}: wall {fmt_time(st['wall_s'])}, busy {fmt_time(st['kernel_s'])}, "
                             f"idle {fmt_time(st['idle_s'])}" + (f", host {fmt_time(st['host_s'])}" if st.get("host_s") else ""))
        if j.get("kernel_classes"):  # the kernels by what their names say they do: what a replay can be compared by
            sec.tables.append(Table(f"profile_kernels_{sc}", f"Kernels per class, per step ({sc})",
                                    [Column("class"), Column("est kernels", "right"), Column("measured kernels", "right"),
                                     Column("estimated", "right"), Column("measured", "right"), Column("ratio", "right"),
                                     Column("costliest measured", kind="code", priority=2)],
                                    [[k["class"], str(k["estimated_kernels"]), str(k["measured_kernels"]),
                                      fmt_time(k["estimated_s"]), fmt_time(k["measured_s"]), _ratio(k["ratio"]),
                                      short_kernel_name(k["top"][0]) if k["top"] else "-"] for k in j["kernel_classes"]]))
        if comp or cap:
            continue
        rows = [[r["op"], fmt_time(r["estimated_s"]), fmt_time(r["measured_s"]), _ratio(r["ratio"]),
                 fmt_share(r["estimated_share"]), fmt_share(r["measured_share"]),
                 ", ".join(short_source(x) for x in (r.get("sources") or [])[:2]) or "-"] for r in j["ops"]]
        sec.tables.append(Table(f"profile_{sc}", f"Per op ({sc})",
                                [Column("op", kind="code"), Column("estimated", "right"), Column("measured", "right"),
                                 Column("ratio", "right"), Column("est share", "right", priority=1),
                                 Column("measured share", "right", priority=1),
                                 Column("source", kind="code", priority=2)], rows))
        sec.tables.append(Table(f"profile_classes_{sc}", f"Per op class ({sc})",
                                [Column("class"), Column("estimated", "right"), Column("measured", "right"),
                                 Column("ratio", "right")],
                                [[c["class"], fmt_time(c["estimated_s"]), fmt_time(c["measured_s"]), _ratio(c["ratio"])]
                                 for c in j["classes"]]))
        if j.get("modules"):
            sec.tables.append(Table(f"profile_modules_{sc}", f"Per module ({sc})",
                                    [Column("module", kind="code", essential=True), Column("estimated", "right"),
                                     Column("measured", "right"), Column("est share", "right", priority=1),
                                     Column("measured share", "right", priority=1)],
                                    [[m["module"], fmt_time(m["estimated_s"]), fmt_time(m["measured_s"]),
                                      fmt_share(m["estimated_share"]), fmt_share(m["measured_share"])]
                                     for m in j["modules"]], more="{n} more modules"))
        only = ", ".join(f"{r['op']} ({fmt_share(r['measured_share'])})" for r in j["only_in_profile"]) or "none"
        sec.after.append(f"{sc}: only in the profile: {only}")
        sec.after.append(f"{sc}: only in the audit: {', '.join(j['only_in_audit']) or 'none'}")
    return sec


def notes_section(data: dict[str, Any]) -> Section:
    sec = Section("notes", "Notes and assumptions")
    sec.lines += [f"note: {n}" for n in data["notes"]] + [f"assumption: {a}" for a in data["assumptions"]]
    return sec


def communication_section(data: dict[str, Any], top: int = 0) -> Section | None:
    """One rank's collectives per scenario: what, where, how big, how long on each chip, HCCL's support, and
    whether the step can hide them behind compute."""
    dist = data.get("distributed")
    scen = [s for s in data["scenarios"] if s.get("communication")]
    if not dist or not scen:
        return None
    sec = Section("communication", f"Communication of rank {dist['rank']} of {dist['world_size']}"
                  + (f" ({dist['layout']})" if dist.get("layout") else f" ({dist['how']})"))
    chips = list(scen[0]["communication"]["by_chip"])
    rows = []
    for chip in chips:
        for s in scen:
            b = s["communication"]["by_chip"][chip]
            ratio = b["compute_to_communication"]
            rows.append([s["name"], chip + (" (target)" if chip == data["chip"] else ""), fmt_si(b["bytes"], "B"),
                         fmt_time(b["communication_s"]), fmt_time(b["exposed_s"]), fmt_time(b["overlappable_s"]),
                         fmt_time(b["compute_s"]), f"{ratio:.2f}" if ratio is not None else "-",
                         "yes" if b["hidden"] else "no", fmt_time(b["step_s"])])
    sec.tables.append(Table("communication", "", [Column("scenario"), Column("chip"), Column("moved", "right"),
                                                   Column("comm", "right"), Column("exposed", "right"),
                                                   Column("can overlap", "right", priority=1),
                                                   Column("compute", "right", priority=1),
                                                   Column("compute/comm", "right", priority=1),
                                                   Column("hides", kind="status"), Column("step with comm", "right")], rows))
    target = data["chip"]
    for s in scen:
        crow = []
        rows_in = s["communication"]["collectives"]
        if 0 < top < len(rows_in):  # the terminal shows the ones that take the most time on the target
            rows_in = sorted(rows_in, key=lambda r: -r["calls"] * r["time_s_per_call"].get(target, 0.0))
        for r in rows_in:
            h = r.get("hccl") or {}
            crow.append([r["kind"] + (" (est.)" if r["estimated"] else ""), r["phase"], r["module"] or "(root)",
                         str(r["calls"]), fmt_si(r["bytes"], "B"), r["dtype"], str(r["group_size"]),
                         fmt_time(r["time_s_per_call"][target]) if target in r["time_s_per_call"] else "-",
                         "overlaps" if r["overlap"] else "exposed", h.get("status", "-")])
        table = Table(f"collectives_{s['name']}", f"Collectives in {s['name']} (per call on {target})",
                      [Column("collective"), Column("phase"), Column("module", kind="code"), Column("calls", "right"),
                       Column("bytes", "right"), Column("dtype", priority=1), Column("group", "right", priority=1),
                       Column("time", "right"), Column("overlap", priority=2), Column("HCCL", kind="status")], crow,
                      more="{n} more collectives (less time)")
        sec.tables.append(table)
    sec.after += [f"estimated: {e}" for e in dist.get("estimated", [])] + [f"note: {n}" for n in dist.get("notes", [])]
    return sec


def build(data: dict[str, Any], top: int = 30, show_views: bool = False) -> list[Section]:
    """The whole document: the answer first, then what to act on, then the inventory and the detail."""
    parts: list[Section | None] = [
        summary(data), scenarios_section(data), profile_section(data), memory_section(data), communication_section(data, top),
        coverage_section(data), findings_section(data),
        scan_section(data),
        fusions_section(data), inventory_section(data, top, show_views), modules_section(data), chips_section(data),
        routes_section(data), notes_section(data),
    ]
    sections = [p for p in parts if p is not None]
    for sec in sections:  # --top: the rows of every table the terminal shows (0: all)
        for t in sec.tables:
            t.limit = top if top > 0 else None
    return sections
