"""The model under audit, parity or bench: loading a model.py or an HF config (loading), scenarios (scenarios), HF builders (hf/)."""
