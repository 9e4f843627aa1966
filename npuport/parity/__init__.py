"""Cross-device numerical parity: capture -> artifact -> compare (optionally against a float64 golden) -> localize.

Pipeline and module map (docs/parity.md): session (same weights and inputs on any device), capture (module and op
outputs, gradients), stats (batched on-device statistics), artifact (manifest + safetensors), metrics, compare,
localize (first divergence, replay, op re-run), report / report_doc (JSON, text, markdown, html), run (commands).
"""
