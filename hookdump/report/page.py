"""The HTML of ``hookdump report``: one static page, every text escaped, inline CSS, no script, no font or
file from the network; links relative to the capture folder. Never prints. The page's frame, contents,
provenance and inputs are here; each tensor's section is :mod:`.tensors_page`'s, those of what ``compare``
and ``top`` left :mod:`.analyses_page`'s."""

from __future__ import annotations

import json
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Any

from ..store.folder import inputtable
from ..store.folder.manifest import MANIFEST
from ..version import __version__
from .analyses_page import analyses_toc, compare_section, top_section
from .markup import e as _e
from .markup import href as _href
from .tensors_page import tensor_section, tensors_toc

if TYPE_CHECKING:
    from .records import InputRow, Report

CSS = """
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"DejaVu Sans",sans-serif;color:#1d2330;
background:#f4f5f7;margin:0}
main{max-width:1180px;margin:0 auto;padding:20px 28px 40px}
h1{font-size:26px;margin:0 0 4px}h1 small{font-size:15px;font-weight:normal;color:#5b6475}
h2{font-size:19px;margin:0 0 8px}h3{font-size:15px;margin:14px 0 6px}
a{color:#1f5fbf}code{font:13px ui-monospace,"DejaVu Sans Mono",monospace;background:#eceef2;padding:0 3px}
.lead{color:#3b4354;margin:0 0 10px}
section,nav{background:#fff;border:1px solid #dde1e7;border-radius:6px;padding:14px 18px;margin:14px 0}
.banner{background:#fff4d6;border:1px solid #e5c15d;border-radius:6px;padding:10px 14px;margin:14px 0}
table{border-collapse:collapse;font-size:14px}td,th{padding:3px 10px;border-bottom:1px solid #e6e9ee;
text-align:left;vertical-align:top}th{color:#5b6475;font-weight:600}
table.kv th{white-space:nowrap}table.stats td{text-align:right;font-variant-numeric:tabular-nums}
.cols{display:flex;flex-wrap:wrap;gap:8px 36px}.cols>div{flex:1 1 300px}
.bad{background:#ffd9d6;color:#9b0000;font-weight:700}
.kind{display:inline-block;font-size:12px;font-weight:600;padding:1px 7px;border-radius:9px;
background:#e3e8f0;color:#33415c;vertical-align:middle}
.k-output{background:#dcebff;color:#174a9c}.k-input{background:#e0f3e4;color:#1d6b32}
.k-grad{background:#fbe5cf;color:#8a4b09}.k-attn{background:#efe1fb;color:#5d2a8c}
.flag{background:#ffd9d6;color:#9b0000}.bad-note{color:#9b0000;margin:8px 0 0}
nav ol{columns:3 300px;margin:6px 0 0;padding-left:22px}nav li{break-inside:avoid;margin:1px 0}
.meta{margin:0 0 8px;color:#3b4354}.none{color:#5b6475;font-style:italic}
figure{margin:10px 0 0}figcaption{font-size:13px;color:#5b6475;margin-top:4px}
figure img{max-width:100%;height:auto;image-rendering:pixelated;border:1px solid #c9ced6}
td img{display:block;border:1px solid #c9ced6}
table.matrix td{text-align:right;font-variant-numeric:tabular-nums}
.sheets{display:flex;flex-wrap:wrap;gap:4px 24px}.channel figure{display:table}
.channel figcaption{display:table-caption;caption-side:bottom}
footer{color:#5b6475;font-size:13px;margin-top:20px}
"""


def html(report: Report, manifest: dict[str, Any], when: str, manifest_sha256: str) -> str:
    """The whole page."""
    model = manifest.get("model") or {}
    name = str(model.get("timm_name") or model.get("requested") or "model")
    inputs = range(inputtable.count(manifest.get("inputs")))
    first = _label(report.inputs[0]) if report.inputs else "image 0"
    banner = f'<div class="banner">{_e(report.banner)}</div>' if report.banner else ""
    body = [
        f"<header><h1>{_e(name)} <small>captured {_e(when)}</small></h1>",
        f'<p class="lead">{len(report.sections)} tensor(s) of {len(inputs)} input(s), on'
        f" {_e(manifest.get('device'))} in {_e(manifest.get('dtype'))}; {_e(_weights(model))}."
        f' <a href="{MANIFEST}">{MANIFEST}</a></p></header>',
        banner,
        _toc(report),
        _provenance(manifest),
        _inputs(report.inputs, len(inputs)),
        *(compare_section(c) for c in report.compares),
        *(top_section(t) for t in report.tops),
        *(tensor_section(s, first, len(inputs)) for s in report.sections),
        f"<footer>Written by hookdump {_e(__version__)} (<code>hookdump report</code>) from manifest.json"
        f" (sha256 <code>{_e(manifest_sha256)}</code>).</footer>",
    ]
    title = f"hookdump: {name}, {len(report.sections)} tensor(s), {when}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f'<meta name="generator" content="hookdump {_e(__version__)}">\n<title>{_e(title)}</title>\n'
        f"<style>{CSS}</style></head>\n<body><main>\n"
        + "\n".join(p for p in body if p)
        + "\n</main></body></html>\n"
    )


def _value(value: Any) -> str:
    """A manifest value as text: none, yes / no, lists comma-separated, objects as JSON."""
    if value is None:
        return '<span class="none">none</span>'
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, list) and all(not isinstance(v, dict | list) for v in value):
        return _e(", ".join(str(v) for v in value)) if value else '<span class="none">none</span>'
    if isinstance(value, dict | list):
        return f"<code>{_e(json.dumps(value))}</code>"
    return _e(value)


def _few(values: Any, limit: int = 16) -> Any:
    """The first ``limit`` of a long list, and how many more."""
    if isinstance(values, list) and len(values) > limit:
        return ", ".join(map(str, values[:limit])) + f", … ({len(values) - limit} more)"
    return values


def _kv(rows: list[tuple[str, Any]]) -> str:
    cells = "".join(f"<tr><th>{_e(k)}</th><td>{_value(v)}</td></tr>" for k, v in rows)
    return f'<table class="kv">{cells}</table>'


def _weights(model: dict[str, Any]) -> str:
    if model.get("checkpoint"):
        return f"weights from {model['checkpoint']}"
    if model.get("pretrained"):
        return "timm's pretrained weights"
    return f"random weights (seed {model.get('seed')})"


def _toc(report: Report) -> str:
    head = '<a href="#provenance">Provenance</a> · <a href="#inputs">Inputs</a>' + analyses_toc(report)
    return f'<nav id="contents"><h2>Contents</h2>{head}<ol>{tensors_toc(report.sections)}</ol></nav>'


_SHOWN = {
    "schema_version", "complete", "hookdump_version", "torch_version", "timm_version", "numpy_version",
    "pillow_version", "python_version", "cwd", "options", "model", "device", "dtype", "transform", "inputs",
    "save_dtype", "channels_last", "reduce", "stopped_early", "grad", "values", "skipped", "notes", "tensors",
}  # fmt: skip


#: The manifest's ``model`` keys of a model's source (torchvision's, a module of the caller's), as shown.
_SOURCE_KEYS = (
    ("source", "source"), ("torchvision_name", "torchvision name"), ("weights", "torchvision weights"),
    ("class", "class"), ("state_dict_sha256", "state dict sha256"),
)  # fmt: skip


def _provenance(m: dict[str, Any]) -> str:
    """Model and weights, how it ran, the transform, versions; notes; options as given; anything else."""
    model, transform = m.get("model") or {}, m.get("transform") or {}
    grad = m.get("grad") or {}
    weights = [
        ("model", model.get("requested")), ("timm name", model.get("timm_name")),
        ("checkpoint", model.get("checkpoint")), ("checkpoint sha256", model.get("checkpoint_sha256")),
        ("pretrained", model.get("pretrained")), ("seed", model.get("seed")),
        ("imports", model.get("imports")),
    ]  # fmt: skip
    weights += [(label, model[key]) for key, label in _SOURCE_KEYS if key in model]  # tv:NAME, a module
    run = [
        ("complete", m.get("complete")), ("device", m.get("device")), ("dtype", m.get("dtype")),
        ("save dtype", m.get("save_dtype")), ("channels last", m.get("channels_last")),
        ("reduce", m.get("reduce")), ("stopped early", m.get("stopped_early")),
        ("grad target", grad.get("target")), ("grad classes", _few(grad.get("classes"))),
        ("skipped inputs", m.get("skipped")),
    ]  # fmt: skip
    versions = [(k.removesuffix("_version"), m.get(k)) for k in sorted(_SHOWN) if k.endswith("_version")]
    other = [(k, v) for k, v in m.items() if k not in _SHOWN]
    notes = "".join(f"<li>{_e(n)}</li>" for n in m.get("notes") or [])
    options = m.get("options") or {}
    values = m.get("values") or []
    parts = [
        '<section id="provenance"><h2>Provenance</h2><div class="cols">',
        f"<div><h3>Model and weights</h3>{_kv(weights)}",
        f"<h3>Working folder</h3><code>{_e(m.get('cwd'))}</code>",
        f"</div><div><h3>Run</h3>{_kv(run)}</div>",
        f"<div><h3>Transform</h3>{_kv(list(transform.items()))}<h3>Versions</h3>{_kv(versions)}</div></div>",
        f"<h3>Notes</h3><ul>{notes}</ul>" if notes else "",
        f"<details><summary>Options as given ({len(options)})</summary>{_kv(list(options.items()))}",
        "</details>",
        f"<details><summary>Non-tensor values ({len(values)})</summary>{_value(values)}</details>"
        if values
        else "",
        f"<h3>Also in the manifest</h3>{_kv(other)}" if other else "",
        "</section>",
    ]
    return "".join(parts)


def _label(row: InputRow) -> str:
    return PurePosixPath(row.label).name if row.sha256 else row.label


def _inputs(rows: list[InputRow], total: int) -> str:
    lines = []
    for row in rows:
        if row.thumbnail:
            box = f'width="{row.width}" height="{row.height}"'
            thumb = f'<img src="{_href(row.thumbnail)}" {box} alt="input {row.number}">'
        else:
            thumb = f'<span class="none">{_e(row.no_thumbnail)}</span>'
        size = "" if not row.size else "x".join(str(d) for d in row.size)
        sha = f'<code title="{_e(row.sha256)}">{_e(row.sha256[:12])}</code>' if row.sha256 else ""
        lines.append(
            f"<tr><td>{row.number}</td><td>{thumb}</td><td>{_e(row.label)}</td><td>{size}</td><td>{sha}</td></tr>"
        )
    more = (
        f"<p>… and {total - len(rows)} more (manifest.json lists them all).</p>" if total > len(rows) else ""
    )
    head = "<tr><th>#</th><th>image</th><th>path</th><th>size</th><th>sha256</th></tr>"
    return (
        f'<section id="inputs"><h2>Inputs ({total})</h2><table>{head}{"".join(lines)}</table>{more}</section>'
    )
