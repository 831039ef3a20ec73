"""The Report model (JSON schema ``trainmedic.report/1``) and its renderers (console, HTML)."""
