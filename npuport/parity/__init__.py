"""Cross-device numerical parity: capture -> artifact -> compare (optionally against a float64 golden) -> localize.

Pipeline and module map (docs/parity.md): session (same weights and inputs on any device), capture (module and op
outputs, gradients), stats (batched on-device statistics), artifact (manifest + safetensors), metrics, compare,
localize (first divergence, replay, op re-run), recording (record), run (compare, behind npuport.api), json_form (the
npuport.parity/1 object that npuport.render.parity_text and parity_doc show). Under torchrun: procgroup (the process
group), ranked (one artifact per rank + rank 0's manifest), shards (DTensor placements; assembling shards), gather
(per-rank captures into one of global tensors), rankwise (rank-by-rank comparison, the worst rank).
"""
