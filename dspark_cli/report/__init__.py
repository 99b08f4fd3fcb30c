"""The validation report: run records read back (sources), a frozen model built from them
(model), rendered as GitHub Markdown (markdown) and JSON (`Report.to_dict`)."""
