"""``graphnn.save`` / ``graphnn.load``: a code-free file format for state dicts.

Loading never executes code: there is no pickle anywhere, only JSON and raw bytes.
``format`` holds the constants and limits below, ``saving`` the writer, ``source`` the bounded
reads from paths and file objects, ``loading`` the header checks and the rebuilt objects.

File layout (all integers little-endian)::

    offset 0   8 bytes   magic b"\\x89GNN\\r\\n\\x1a\\n"
    offset 8   u32       format version (1)
    offset 12  u32       CRC-32 of the header bytes
    offset 16  u64       header length H (a multiple of 8; the JSON is padded with spaces)
    offset 24  H bytes   UTF-8 JSON header
    offset 24+H          data: every tensor's bytes, C order, little-endian, packed back to back

The header is ``{"format": "graphnn", "version": 1, "data_size": D, "data_crc32": C,
"root": NODE}``. A NODE is a JSON ``null``/``true``/``false``/integer/finite float/string for a
plain value, or an object tagged by ``"t"``:

* ``{"t": "dict", "items": [[KEY, NODE], ...]}`` (``"odict"`` for an ``OrderedDict``); keys are
  plain values (str, int, float, bool, None), so optimizer state dicts with int keys round-trip;
* ``{"t": "list", "items": [NODE, ...]}`` and ``{"t": "tuple", ...}``;
* ``{"t": "float", "v": "nan" | "inf" | "-inf"}``;
* ``{"t": "tensor", "dtype": "float32", "shape": [2, 3], "offsets": [begin, end]}`` with byte
  offsets relative to the data section, plus ``"requires_grad": true`` when set.

Tensors load as plain ``graphnn.Tensor`` objects (owning their memory) with their dtype, shape
and ``requires_grad`` flag; tensors that shared memory when saved load as independent copies.
NumPy scalars save as the Python value they hold. Integers are stored as JSON text, so they
have at most 4300 decimal digits (Python's default limit for reading them back).

Bounds a loader checks before it reads or allocates: the header length and the data size must
fit in the bytes the file still holds (for a stream of unknown length, bytes are read in
chunks as they arrive, so memory only grows with what the stream delivers); a tensor has at
most 64 dimensions, NumPy's limit on its nominal size (itemsize times the product of its
non-zero dimensions below 2**63), and byte offsets that tile the data section exactly.
A path must name a regular file: a FIFO, device or directory is refused before it is opened.
Whatever bytes a file holds, loading returns a value or raises ``SerializationError`` naming
the file and the problem; both CRCs make a flipped bit anywhere in the header or the data an
error rather than a silently different state dict.
"""
from .format import FORMAT_VERSION, MAGIC, SaveTypeError
from .loading import load
from .saving import save

__all__ = ["save", "load", "SaveTypeError", "MAGIC", "FORMAT_VERSION"]
