#!/usr/bin/env python3
"""Hold the audit's step-time estimate against measured profiles (issue 22's check; the table of docs/profile.md).

For each model directory under PROFILES (written by `npuport profile record --out-dir PROFILES/MODEL`, one
NAME.profile.json per scenario), the audit of examples/configs/MODEL.json runs with the recorded scenarios on --chip
and every artifact is joined to it. Per scenario it prints the estimated and measured step (the unprofiled median
wall time), their error, the estimated device time against the measured kernel time per step, and the half-L1
distance between the estimated and measured time shares per op.

    python scripts/profile_check.py docs/measured/profiles --chip H200 [--markdown]
    python scripts/profile_check.py docs/measured/profiles --chip H200 --fit-host tinyllama-1.1b
    python scripts/profile_check.py docs/measured/profiles docs/measured/profile-runs/*/ --chip H200 --runs [--markdown]
    python scripts/profile_check.py docs/measured/profiles docs/measured/profile-runs/*/ --host-ratio

--runs holds the same estimate against several recorded runs (one folder each, possibly from different lent
machines) and prints, per held-out model and scenario, the error and share distance in each run and how many runs
meet the 15% / 0.05 goals: on a shared host an eager step's host side moves between runs by more than 15%.

--host-ratio prints, per model and scenario, each run's median host probe and its steps' host issue time per
probe (ms per µs): a probe that measured the host's speed fully would keep that ratio the same in every run.

--kernels prints, for the graph, compile and reduce-overhead steps, the kernels per step and kernel class
(mappings/kernel_classes.yaml), estimated and measured: their kernels carry no aten op to compare per op.

--masked-attention prints, for every compiled train / prefill step of the folders, the library attention kernels'
time per step (forward, backward) against the causal estimate: timing.yaml compile_masked_attention is TinyLlama's.

--fit-graph-input MODEL prints the host cost per input tensor that a torch.compile(mode="reduce-overhead") replay
copies into its graph, fit to MODEL's reduce-overhead decode (timing.yaml graph_input_s).

--fit-host MODEL prints the host costs per eager call (forward, backward) that make the simulated steps of MODEL
match its measured ones (its prefill and decode fit the forward cost, its train step then the backward cost): the
calibration mappings/timing.yaml takes for the chip. The other models are then held against it, not fit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from npuport import api  # noqa: E402
from npuport.cost.inventory import step_time, timing_class  # noqa: E402
from npuport.cost.timing import timing_for  # noqa: E402
from npuport.profile.host_speed import step_probes  # noqa: E402
from npuport.profile.join import join  # noqa: E402
from npuport.render.fmt import short_kernel_name  # noqa: E402

ORDER = ("train", "prefill", "decode")


def _artifacts(folder: Path) -> dict[str, dict[str, Any]]:
    arts = {}
    for f in sorted(folder.glob("*.profile.json")):
        art = json.loads(f.read_text())
        arts[art["scenario"]["name"]] = art
    return dict(sorted(arts.items(), key=lambda kv: ORDER.index(kv[0]) if kv[0] in ORDER else 9))


def _audit(model: str, arts: dict[str, dict[str, Any]], chip: str) -> tuple[Any, dict[str, Any]]:
    config = ROOT / "examples" / "configs" / f"{model}.json"
    specs = tuple(a["scenario"]["spec"] for a in arts.values())
    dtype = next(iter(arts.values()))["recorded"]["dtype"]
    return api.audit(api.ModelSpec(hf_config=str(config), dtype=dtype), api.AuditOptions(scenarios=specs, chip=chip))


def check(folder: Path, chip: str) -> list[dict[str, Any]]:
    rows = []
    for model_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        arts = _artifacts(model_dir)
        if not arts or not (ROOT / "examples" / "configs" / f"{model_dir.name}.json").is_file():
            continue
        report, data = _audit(model_dir.name, arts, chip)
        inv = report.inventory
        tm = timing_for(inv.chip)
        for name, art in arts.items():
            j = join(data, art, name)
            st = j["step"]
            plain = art["unprofiled"]["step_s"]
            probe = (art.get("host_probe") or {}).get("op_s")
            mode = art["scenario"].get("mode") or "eager"
            copied = inv.totals[name].graph_inputs  # reduce-overhead: what each replay copies in
            on_host = (step_time(inv.calls[name], inv.chip, mode, model=replace(tm, host=tm.host.scaled(probe)),
                                 graph_inputs=copied).step_s
                       if probe else None)
            # each timed step against the estimate for the host speed probed around it (where recorded: the mean of
            # the probes before and after it, else the one before)
            per_step = step_probes(art["unprofiled"])
            step_errors = ([step_time(inv.calls[name], inv.chip, mode, model=replace(tm, host=tm.host.scaled(p)),
                                      graph_inputs=copied).step_s
                            / w - 1.0 for p, w in zip(per_step, plain)] if per_step else None)
            rows.append({"model": model_dir.name, "scenario": art["scenario"]["spec"],
                         "estimated_s": st["estimated"]["step_s"], "measured_s": st["measured"]["step_s"],
                         "measured_range_s": (min(plain), max(plain)), "error": st.get("error"),
                         "est_device_s": st["estimated"].get("device_s"), "kernel_s": st["measured"]["device_s"],
                         # a graph replay's kernels, and a compiled step's fused ones, have no aten op to be
                         # matched by: no share distance
                         "device_error": st.get("device_error"), "distance": j["distance"] if mode == "eager" else None,
                         "bound": st["estimated"].get("bound"), "est_host_s": st["estimated"].get("host_s"),
                         "host_issue_s": st["measured"].get("host_issue_s"), "host_error": st.get("host_error"),
                         "host_probe_s": probe, "estimated_on_host_s": on_host,
                         "roofline_s": next(x["roofline_time_s"] for x in data["scenarios"] if x["name"] == name),
                         "error_on_host": on_host / st["measured"]["step_s"] - 1.0 if on_host else None,
                         "error_per_step": statistics.median(step_errors) if step_errors else None})
    return rows


def fit_host(folder: Path, model: str, chip: str) -> None:
    arts = _artifacts(folder / model)
    report, _ = _audit(model, arts, chip)
    inv = report.inventory
    tm = timing_for(inv.chip)
    probes = [p for a in arts.values() for p in step_probes(a["unprofiled"]) or []]
    ref = statistics.median(probes) if probes else None

    def host(name: str) -> float:
        # the host's issue time where the profile has it (the step's call returning), else the wall time; with a
        # probe before each step, each step's time is brought to the median probe's host speed first
        plain = arts[name]["unprofiled"]
        steps = step_probes(plain)
        if ref and steps and plain.get("host_s"):
            return statistics.median(h * ref / p for h, p in zip(plain["host_s"], steps))
        return float(plain.get("host_median_s") or plain["median_s"])

    # each class's host cost beyond the per-call cost (timing.yaml class_extra, in host probes) at this host's speed:
    # what is left of the measured host time is the per-call cost fit here
    at_ref = replace(tm.host, reference_probe_s=ref or tm.host.reference_probe_s)

    def extras(name: str, backward: bool | None = None) -> float:
        return sum(at_ref.extra_s(timing_class(c, tm)) for c in inv.calls[name]
                   if c.kind != "view" and (backward is None or (c.phase == "backward") == backward))

    fwd = []
    for name in ("prefill", "decode"):
        calls = inv.calls[name]
        n = sum(1 for c in calls if c.kind != "view")
        fwd.append((host(name) - extras(name)) / n)
    hf = statistics.fmean(fwd)
    train = inv.calls["train"]
    nf = sum(1 for c in train if c.kind != "view" and c.phase != "backward")
    nb = sum(1 for c in train if c.kind != "view" and c.phase == "backward")
    hb = (host("train") - extras("train") - nf * hf) / nb
    print(f"{model} on {chip}: forward_call_s {hf:.3g} (prefill {fwd[0]:.3g}, decode {fwd[1]:.3g}), "
          f"backward_call_s {hb:.3g} ({nf} forward + {nb} backward compute calls in train)"
          + (f", reference_probe_s {ref:.3g} (median of the timed steps' probes)" if ref else ""))
    host = replace(at_ref, forward_call_s=hf, backward_call_s=hb)
    fitted = replace(tm, host=host)
    for name in arts:
        st = step_time(inv.calls[name], inv.chip, model=fitted)
        print(f"  {name}: simulated {st.step_s * 1e3:.1f} ms against {arts[name]['unprofiled']['median_s'] * 1e3:.1f} ms")


def _decode_at_reference_host(folder: Path, model: str, chip: str, mode: str | None = None) -> tuple[Any, Any, float, float]:
    """`model`'s decode profile audited on `chip`: (inventory, timing model, reference probe, the median of its timed
    steps' host issue times brought to the reference probe's host speed)."""
    arts = {k: v for k, v in _artifacts(folder / model).items() if k == "decode"}
    if not arts or mode is not None and (arts["decode"]["scenario"].get("mode") or "eager") != mode:
        sys.exit(f"{folder / model}: no decode profile recorded" + (f" with mode={mode}" if mode else ""))
    report, _ = _audit(model, arts, chip)
    tm = timing_for(report.inventory.chip)
    ref = tm.host.reference_probe_s
    plain = arts["decode"]["unprofiled"]
    return report.inventory, tm, ref, statistics.median(h * ref / p for h, p in zip(plain["host_s"], step_probes(plain)))


def fit_compile(folder: Path, model: str, chip: str, calibration: Path) -> tuple[float, float]:
    """torch.compile's host costs (timing.yaml compile_*): the cost of a compiled graph's call from the calibration
    (scripts/calibrate_compile_host.py: the per-graph intercept of its GEMM chain, in host probes), and one cost per
    kernel launched (generated or extern alike: the wrapper allocates, checks and launches each) fit to `model`'s
    compiled decode step, which is bound by the host: its host issue time at the reference probe's speed, less the
    graph call and the extern kernels' class extras, over the kernels the model launches (npuport.cost.fused)."""
    cal = json.loads(calibration.read_text())
    cal_probe = statistics.mean(cal["probe_s"])
    graph_probes = cal["points"]["mm"]["graph_s"] / cal_probe
    inv, tm, ref, host_at_ref = _decode_at_reference_host(folder, model, chip)
    calls = inv.calls["decode"]
    zero = replace(tm, host=replace(tm.host, compile_graph_s=0.0, compile_kernel_s=0.0, compile_extern_s=0.0))
    base = step_time(calls, inv.chip, "compile", model=zero)  # the class extras alone, and the kernel count
    graph_s = graph_probes * ref
    kernel_s = (host_at_ref - graph_s - base.host_s) / base.kernels
    print(f"{model} decode on {chip}: compile_graph_s {graph_s:.3g} ({graph_probes:.2f} probes, {calibration.name}), "
          f"compile_kernel_s = compile_extern_s {kernel_s:.3g} ({base.kernels} kernels, host issue "
          f"{host_at_ref * 1e3:.2f} ms at reference_probe_s {ref:.3g}, extras {base.host_s * 1e3:.2f} ms)")
    return graph_s, kernel_s


def fit_graph_input(folder: Path, model: str, chip: str) -> float:
    """torch.compile mode="reduce-overhead"'s host cost per input tensor a replay copies into its graph (timing.yaml
    graph_input_s), fit to `model`'s reduce-overhead decode step, whose inputs are its KV cache (two tensors a
    layer) and whose host time is almost all spent on them: its host issue time at the reference probe's speed, less
    what the estimate already gives the host (the graph call and its replay launch), over the input tensors."""
    inv, tm, ref, host_at_ref = _decode_at_reference_host(folder, model, chip, "reduce-overhead")
    inputs = inv.totals["decode"].graph_inputs
    if not inputs.tensors:
        sys.exit(f"{model}: its decode step has no input tensor to copy (nothing to fit)")
    zero = replace(tm, host=replace(tm.host, graph_input_s=0.0))
    base = step_time(inv.calls["decode"], inv.chip, "reduce-overhead", model=zero, graph_inputs=inputs)
    per_input = (host_at_ref - base.host_s) / inputs.tensors
    print(f"{model} decode on {chip}: graph_input_s {per_input:.3g} ({per_input / ref:.2f} host probes; "
          f"{inputs.tensors} input tensors, {inputs.bytes / 2**30:.2f} GiB; host issue {host_at_ref * 1e3:.2f} ms at "
          f"reference_probe_s {ref:.3g}, of it the graph call and launch {base.host_s * 1e3:.2f} ms)")
    return per_input


def masked_attention(folders: list[Path], chip: str) -> None:
    """A compiled causal attention runs cuDNN's masked kernel (its bias written out): per folder of compiled profiles
    and model, the library attention kernels' time per step, forward and backward, against the attention calls'
    causal estimate on `chip` (timing.yaml compile_masked_attention is the calibration model's ratio)."""
    from npuport.cost.inventory import timing_class as tclass
    from npuport.profile.join import op_class

    print("| folder | model | scenario | forward: measured / causal estimate | ratio | backward: measured / causal estimate | ratio |")
    print("|---|---|---|---|---:|---|---:|")
    for folder in folders:
        for model_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
            arts = {k: v for k, v in _artifacts(model_dir).items() if v["scenario"].get("mode") == "compile"
                    and v["scenario"]["kind"] in ("train", "prefill")}
            if not arts:
                continue
            report, _ = _audit(model_dir.name, arts, chip)
            inv = report.inventory
            tm = timing_for(inv.chip)
            for name, art in arts.items():
                steps = max(len(art["steps"]), 1)
                cells = []
                for backward in (False, True):
                    # the library kernels' op (aten::_cudnn_attention_forward ...), not the SDPA call around it
                    meas = sum(r["device_s"] for r in art["ops"] if r["device_s"] > 0 and op_class(r["op"]) == "attention"
                               and ("backward" in r["op"]) == backward and not r["op"].startswith("triton")) / steps
                    est = sum(c.time_s for c in inv.calls[name] if tclass(c, tm).startswith("attention")
                              and (c.phase == "backward") == backward)
                    cells.append(f"{meas * 1e3:.2f} / {est * 1e3:.2f} ms | {meas / est:.2f}x" if est and meas else "- | -")
                where = folder.resolve().relative_to(ROOT) if folder.resolve().is_relative_to(ROOT) else folder
                print(f"| {where} | {model_dir.name} | {art['scenario']['spec']} | {cells[0]} | {cells[1]} |")


def kernel_counts(folder: Path, chip: str) -> None:
    """Graph, compiled and reduce-overhead steps, whose kernels carry no aten op to compare per op: per step, the
    kernels the estimate launches per kernel class against the profile's kernels classed by name
    (mappings/kernel_classes.yaml; artifacts written before kernel classes: the Triton / extern counts only)."""
    print("| model | scenario | class | estimated kernels | measured kernels | estimated | measured | ratio | costliest measured |")
    print("|---|---|---|---:|---:|---:|---:|---:|---|")
    for model_dir in sorted(p for p in folder.iterdir() if p.is_dir()):
        arts = {k: v for k, v in _artifacts(model_dir).items() if (v["scenario"].get("mode") or "eager") != "eager"}
        if not arts:
            continue
        report, data = _audit(model_dir.name, arts, chip)
        for name, art in arts.items():
            j = join(data, art, name)
            spec = art["scenario"]["spec"]
            if not j["kernel_classes"]:  # an older artifact: the kernels the profile ties to Triton or an aten op
                steps = art["recorded"]["steps"]
                tri = sum(o["calls"] for o in art["ops"] if o["op"].startswith("triton")) // steps
                ext = sum(o["calls"] for o in art["ops"] if o["op"].startswith("aten::") and o["device_s"] > 0) // steps
                est = j["step"]["estimated"]
                gen = ((est.get("timing_classes") or {}).get("generated") or {}).get("kernels", 0)
                total = est.get("kernels")
                split = f"{gen} generated + {total - gen} extern" if total is not None else "-"
                print(f"| {model_dir.name} | {spec} | (no kernel classes in the artifact) | {split} | "
                      f"Triton {tri} + extern {ext} | | | | |")
                continue
            for k in j["kernel_classes"]:
                top = short_kernel_name(k["top"][0], 50) if k["top"] else "-"
                ratio = f"{k['ratio']:.2f}x" if k["ratio"] is not None else "-"
                print(f"| {model_dir.name} | {spec} | {k['class']} | {k['estimated_kernels']} | {k['measured_kernels']} | "
                      f"{k['estimated_s'] * 1e6:.0f} µs | {k['measured_s'] * 1e6:.0f} µs | {ratio} | `{top}` |")


def host_ratio(folders: list[Path]) -> None:
    """Per model and scenario, in each run: the median of the steps' probes and of host issue time / probe."""
    print("| model | scenario | per run: median probe (µs) -> host issue per probe (ms/µs), slowest probe last |")
    print("|---|---|---|")
    for model in sorted({d.name for f in folders for d in f.iterdir() if d.is_dir()}):
        for name in ("train", "prefill", "decode"):
            points = []
            for folder in folders:
                path = folder / model / f"{name}.profile.json"
                if not path.is_file():
                    continue
                plain = json.loads(path.read_text())["unprofiled"]
                probes, issued = step_probes(plain), plain.get("host_s")
                if probes and issued:
                    points.append((statistics.median(probes) * 1e6,
                                   statistics.median(h / p for h, p in zip(issued, probes)) * 1e-3, folder.name))
            if points:
                print(f"| {model} | {name} | " + ", ".join(f"{run} {p:.1f} -> {r:.2f}" for p, r, run in sorted(points)) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", type=Path, nargs="+")
    ap.add_argument("--runs", action="store_true", help="summarize the folders as repeated runs")
    ap.add_argument("--calibration-model", default="tinyllama-1.1b", help="left out of --runs (its host costs are fit)")
    ap.add_argument("--chip", default="H200")
    ap.add_argument("--fit-host", metavar="MODEL")
    ap.add_argument("--fit-compile", metavar="MODEL", help="torch.compile's host costs from MODEL's compiled decode")
    ap.add_argument("--calibration", type=Path, help="scripts/calibrate_compile_host.py output, for --fit-compile")
    ap.add_argument("--fit-graph-input", metavar="MODEL",
                    help="reduce-overhead's host cost per copied input tensor from MODEL's reduce-overhead decode")
    ap.add_argument("--kernels", action="store_true",
                    help="graph / compiled / reduce-overhead steps: kernels per step and class, estimated and measured")
    ap.add_argument("--masked-attention", action="store_true",
                    help="compiled steps: the masked attention kernels' time against the causal estimate (all folders)")
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--host-ratio", action="store_true", help="each run's host probe against its steps' host time")
    args = ap.parse_args()
    if args.host_ratio:
        host_ratio(args.profiles)
        return
    if args.kernels:
        kernel_counts(args.profiles[0], args.chip)
        return
    if args.masked_attention:
        masked_attention(args.profiles, args.chip)
        return
    if args.fit_compile:
        if args.calibration is None:
            ap.error("--fit-compile needs --calibration")
        fit_compile(args.profiles[0], args.fit_compile, args.chip, args.calibration)
        return
    if args.fit_graph_input:
        fit_graph_input(args.profiles[0], args.fit_graph_input, args.chip)
        return
    if args.fit_host:
        fit_host(args.profiles[0], args.fit_host, args.chip)
        return
    if args.runs:
        runs(args.profiles, args.chip, args.calibration_model, args.markdown)
        return
    rows = check(args.profiles[0], args.chip)
    ms = 1e3
    if args.markdown:
        print("| model | scenario | measured step (range) | estimated | error | for the run's host (probe) | error | "
              "per step, its host probed | est. host / measured host issue | est. device / measured kernels | roofline alone / kernels | share distance | bound |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in rows:
            lo, hi = r["measured_range_s"]
            print(f"| {r['model']} | {r['scenario']} | {r['measured_s'] * ms:.1f} ms ({lo * ms:.1f}-{hi * ms:.1f}) | "
                  f"{r['estimated_s'] * ms:.1f} ms | {r['error']:+.0%} | {r['estimated_on_host_s'] * ms:.1f} ms "
                  f"({r['host_probe_s'] * 1e6:.1f} µs) | {r['error_on_host']:+.0%} | {_pct(r['error_per_step'])} | {_host(r)} | {r['est_device_s'] * ms:.1f} / "
                  f"{r['kernel_s'] * ms:.1f} ms ({r['device_error']:+.0%}) | {r['roofline_s'] / r['kernel_s']:.2f}x | "
                  f"{_dist(r['distance'])} | {r['bound']} |")
        return
    for r in rows:
        lo, hi = r["measured_range_s"]
        print(f"{r['model']:15} {r['scenario']:32} est {r['estimated_s'] * ms:7.1f} ms  measured {r['measured_s'] * ms:7.1f} "
              f"({lo * ms:.1f}-{hi * ms:.1f})  err {r['error']:+5.0%}  host-scaled err {r['error_on_host']:+5.0%}  per-step {_pct(r['error_per_step'])}  device {r['est_device_s'] * ms:6.1f}/{r['kernel_s'] * ms:6.1f} "
              f"({r['device_error']:+4.0%})  host {_host(r)}  distance {_dist(r['distance'])}  {r['bound']}-bound")


def runs(folders: list[Path], chip: str, calibration: str, markdown: bool) -> None:
    table: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for folder in folders:
        for r in check(folder, chip):
            if r["model"] != calibration:
                table.setdefault((r["model"], r["scenario"]), []).append(r)
    names = [f.name if f.name != "profiles" else "profiles (committed)" for f in folders]
    step_ok = host_ok = host_total = dist_ok = total = 0
    lines = []
    for (model, sc), rs in table.items():
        errs = " / ".join(f"{r['error']:+.0%}" for r in rs)
        # each step against the estimate for the host speed probed around it (a run recorded without
        # per-step probes: the probe after its steps)
        at_host = [r["error_per_step"] if r["error_per_step"] is not None else r["error_on_host"] for r in rs]
        dists = " / ".join(_dist(r["distance"]) for r in rs)
        ok_s = sum(abs(r["error"]) <= 0.15 for r in rs)
        ok_h = sum(e is not None and abs(e) <= 0.15 for e in at_host)
        n_h = sum(e is not None for e in at_host)
        ok_d = sum(r["distance"] is not None and r["distance"] <= 0.05 for r in rs)
        step_ok, dist_ok, total = step_ok + ok_s, dist_ok + ok_d, total + len(rs)
        host_ok, host_total = host_ok + ok_h, host_total + n_h
        bound = "/".join(sorted({str(r["bound"]) for r in rs}))
        meas = " / ".join(f"{r['measured_s'] * 1e3:.1f}" for r in rs)
        lines.append((model, sc, meas, f"{rs[0]['estimated_s'] * 1e3:.1f}", errs, f"{ok_s} of {len(rs)}",
                      " / ".join(_pct(e) for e in at_host), f"{ok_h} of {n_h}", dists, f"{ok_d} of {len(rs)}", bound))
    summary = (f"within 15%: {step_ok} of {total}; at the host speed probed: {host_ok} of {host_total}; "
               f"share distance at most 0.05: {dist_ok} of {total}")
    if markdown:
        print(f"runs, in this order: {', '.join(names)}\n")
        print("| model | scenario | measured step per run (ms) | estimated (ms) | error per run | within 15% | "
              "error at the host speed probed, per run | within 15% | share distance per run | at most 0.05 | bound |")
        print("|---|---|---|---|---|---|---|---|---|---|---|")
        for ln in lines:
            print("| " + " | ".join(ln) + " |")
        print(f"\n{summary}")
        return
    for ln in lines:
        print("  ".join(ln))
    print(summary)


def _host(r: dict[str, Any]) -> str:
    if r["est_host_s"] is None:
        return "n/a"
    if r["host_issue_s"] is None:  # recorded before the host's issue time was kept
        return f"{r['est_host_s'] * 1e3:.1f} ms / n/a"
    return f"{r['est_host_s'] * 1e3:.1f} / {r['host_issue_s'] * 1e3:.1f} ms ({r['host_error']:+.0%})"


def _pct(x: float | None) -> str:
    return "n/a" if x is None else f"{x:+.0%}"


def _dist(d: float | None) -> str:
    return "n/a" if d is None else f"{d:.3f}"


if __name__ == "__main__":
    main()
