"""The self-contained HTML trace explorer: data export (export.py) and the page (page.py, template.html)."""
