"""Views of the JSON forms: text, markdown, CSV and HTML renderers that read only the plain dicts of
npuport.audit.json_form, npuport.parity.json_form, npuport.bench.json_form and scan.source_scan.ScanReport.to_json (never
the report objects), so every format shows the same data; nothing here imports the rest of npuport."""
