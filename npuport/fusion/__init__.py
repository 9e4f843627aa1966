"""Fusion advice: unfused norm / attention / activation chains found in the trace, with the fused NPU op checked, and the
scored implementation routes of hot ops and chains (routes.py)."""
