"""The audit pipeline: trace -> cost -> coverage -> findings -> advice (pipeline.run_audit), its typed report and its JSON form.

Each stage is a module returning its own dataclass of report.py; json_form.audit_to_json builds the npuport.audit/1
object that every renderer in npuport.render reads. bench reuses trace_stage and cost_stage.
"""
