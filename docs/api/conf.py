"""Sphinx configuration of dpreg's API reference (built from the docstrings).

Build (from the checkout root, with the docs extra installed)::

    python -m sphinx -W --keep-going -b html docs/api docs/api/_build
"""
import dpreg

project = "dpreg"
release = version = dpreg.__version__
extensions = ["sphinx.ext.autodoc", "sphinx.ext.napoleon"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {
    "members": True,
    "show-inheritance": True,
    # scikit-learn's metadata-routing setters, added to every estimator class
    "exclude-members": "set_fit_request, set_score_request, set_predict_request",
}
# the pages are the API reference only; the user documents are README.md and docs/*.md
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list = []
# "a, b, c: text" in an Args section documents several parameters at once
napoleon_use_param = False
napoleon_use_ivar = True
