"""A capture folder: its layout and its promise (exit 0 means complete and right; a user's file is never
replaced), over the tensor formats of :mod:`hookdump.store.formats`.

Public surface, a module each: ``writer`` (``Writer``: the run's streams into the scratch folder, a
checkpoint after each batch, the commit), ``saved`` (the other formats and the manifest's entries at the
end), ``commit`` (the final moves, safe to stop anywhere), ``journal`` (the resume journal in the scratch
folder), ``outdir`` (what a folder holds, whether this run may write there), ``claims`` (the one check of
what any command may write), ``lock`` (one run at a time), ``manifest`` (``manifest.json``'s names and
schema), ``records`` (``Captured``, the record the hooks make and the writer writes), ``inputtable``
(``inputs.parquet``), ``reader`` (``Capture``: the one reader of a capture folder, ``hookdump.open``),
``tensorfile`` (one tensor as ``show`` draws it), ``summary`` (``hookdump stats``) and ``profile`` (where a
run's time goes).

Imports the ground, ``model``, ``inputs`` and :mod:`hookdump.store.formats`. Nothing is imported here.
"""
