from pathlib import Path

from npuport.rules.rules_doc import render_markdown


def test_docs_rules_md_is_up_to_date() -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "rules.md"
    assert page.read_text() == render_markdown(), "regenerate: python -m npuport.rules.rules_doc > docs/rules.md"
