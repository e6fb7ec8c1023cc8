"""Sphinx configuration for the skbert documentation.

Build (offline, warnings as errors), from the repository root::

    python -m sphinx -W --keep-going -b html docs docs/_build/html

Nothing runs at build time except autodoc's import of skbert: the gallery
renders the scripts in ``examples/`` without executing them, and nothing is
fetched from the network (no intersphinx, no remote images).
"""

import logging
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document this checkout's skbert

import skbert  # noqa: E402

project = "skbert"
author = "skbert developers"
copyright = "skbert developers"
release = skbert.__version__
version = release

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "sphinx_gallery.gen_gallery",
    "myst_parser",
]

source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
templates_path = ["_templates"]
exclude_patterns = ["_build", "**.ipynb_checkpoints"]

# -- autodoc / autosummary ----------------------------------------------------
autosummary_generate = True
autosummary_imported_members = False
autodoc_typehints = "none"  # numpydoc's Parameters sections say the types
add_module_names = False

# -- numpydoc -------------------------------------------------------------------
# Members are listed by the autosummary class template (autodoc's :members:),
# not by numpydoc's tables, which would also list every inherited
# scikit-learn method and need pages for each.
numpydoc_show_class_members = False
numpydoc_show_inherited_class_members = False
numpydoc_class_members_toctree = False
numpydoc_attributes_as_param_list = True
numpydoc_xref_param_type = False

# -- MyST (docs/scaling.md, which README.md links to, is a page as is) ----------
myst_enable_extensions = []
myst_heading_anchors = 3

# -- sphinx-gallery -------------------------------------------------------------
# The examples take minutes and read data that is not bundled (SST-2, SciFact
# next to the repository), so the gallery shows their code and text without
# running them: plot_gallery is off and filename_pattern matches no file.
sphinx_gallery_conf = {
    "examples_dirs": str(ROOT / "examples"),
    "gallery_dirs": "auto_examples",
    "plot_gallery": False,
    "filename_pattern": r"^(?!)",
    "ignore_pattern": r"__init__\.py",
    "image_scrapers": (),
    "within_subsection_order": "FileNameSortKey",
    "remove_config_comments": True,
    "download_all_examples": False,
    "show_memory": False,
    "show_signature": False,
    "write_computation_times": False,
    "backreferences_dir": None,
    "doc_module": (),
    "reset_modules": (),
}

# Thumbnails: tracked pictures that the scripts draw, shown instead of the
# default thumbnail (the scripts are not run, so they make none themselves).
GALLERY_THUMBNAILS = {
    "layer_probe": DOCS / "layer_report_trec.png",
    "freeze_vs_finetune": DOCS / "freeze_vs_finetune.png",
}

# -- HTML -----------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"skbert {release}"
html_static_path = []
html_show_sourcelink = False
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "header_links_before_dropdown": 6,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_context = {"default_mode": "auto"}


def _gallery_thumbnails(app):
    """Put the tracked pictures in place of two examples' default thumbnails.

    Runs after sphinx-gallery has written the gallery (its builder-inited
    handler has priority 500), and scales the picture as sphinx-gallery
    scales thumbnails of its own.
    """
    from sphinx_gallery.gen_rst import scale_image

    gallery_conf = app.config.sphinx_gallery_conf
    width, height = gallery_conf.get("thumbnail_size", (400, 280))
    thumb_dir = Path(app.srcdir) / "auto_examples" / "images" / "thumb"
    if not thumb_dir.is_dir():
        return
    for example, picture in GALLERY_THUMBNAILS.items():
        thumb = thumb_dir / f"sphx_glr_{example}_thumb.png"
        if thumb.exists() and picture.exists():
            scale_image(str(picture), str(thumb), width, height)


def _version_docstring(app, what, name, obj, options, lines):
    """Describe ``skbert.__version__``, a str, instead of showing str's docstring."""
    if name == "skbert.__version__":
        lines[:] = [
            "The version of the installed skbert distribution, from its metadata",
            '(``importlib.metadata.version("skbert")``); ``"unknown"`` when skbert',
            "runs from a source tree that is not installed.",
        ]


def _skip_metadata_requests(app, what, name, obj, skip, options):
    """Leave out scikit-learn's generated ``set_{method}_request`` methods."""
    if name.startswith("set_") and name.endswith("_request"):
        return True
    return None


def setup(app):
    # myst-parser logs its whole configuration (about 900 characters) at INFO level on every
    # build, and sphinx-gallery how it would convert notebooks it does not run; their warnings
    # and errors still show.
    for name in ("sphinx.myst_parser.sphinx_ext.main", "sphinx.sphinx-gallery"):
        logging.getLogger(name).setLevel(logging.WARNING)
    app.connect("builder-inited", _gallery_thumbnails, priority=900)
    app.connect("autodoc-process-docstring", _version_docstring)
    app.connect("autodoc-skip-member", _skip_metadata_requests)
