"""After the dump: what two captures, or the layers of one, say next to each other. ``diff`` (tensor by
tensor, within a tolerance, the first one to diverge), ``cka`` and ``rsa`` (representational similarity from
Gram matrices accumulated in chunks), ``similarity`` (``hookdump compare``'s layer x layer matrix), ``top``
(each channel's top inputs, one streamed pass); ``captures`` opens the folders and pairs their tensors.
Reads capture folders only through ``store.folder.reader``; numpy only, never torch.

Imports the ground, ``inputs``, ``store`` and ``pictures``. Imported by report, api and cli.
"""
