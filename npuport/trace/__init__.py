"""Tracing on fake tensors: the one op recorder (recorder), its plain records (records), op naming (naming), the one
module tracker (modules.ModuleStack, shared by the audit and parity capture) and the fake-mode run helpers (run)."""
