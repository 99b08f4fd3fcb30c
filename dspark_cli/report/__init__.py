"""The validation report: run records read back (sources), each section built and rendered by
its own module, the whole built and written as GitHub Markdown and JSON (markdown)."""
