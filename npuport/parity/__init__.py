"""Cross-device numerical parity: capture -> artifact -> compare (optionally against a float64 golden) -> localize.

Pipeline and module map (docs/parity.md): session (same weights and inputs on any device), capture (module and op
outputs, gradients), stats (batched on-device statistics), artifact (manifest + safetensors), metrics, compare,
localize (first divergence, replay, op re-run), run (record / compare, behind npuport.api), json_form (the
npuport.parity/1 object that npuport.render.parity_text and parity_doc show).
"""
