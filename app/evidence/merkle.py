"""RFC 6962 / RFC 9162 Merkle tree hashing, the compact range, inclusion and consistency proofs.

Hashing (RFC 9162 section 2.1.1): ``leaf = SHA-256(0x00 || data)``,
``node = SHA-256(0x01 || l || r)``, the empty tree's root is ``SHA-256("")``, and a tree of
``n > 1`` leaves splits at the largest power of two ``k < n``. The 0x00/0x01 prefixes are the
domain separation that gives second-preimage resistance; never use the Bitcoin construction
(duplicating an odd last node).

A *compact range* ``[0, n)`` is the list of roots of the perfect subtrees that cover the leaves,
largest (leftmost) first: one hash per set bit of ``n``. Appending a leaf merges as many subtrees as
``n`` has trailing one bits, so the state is O(log n) and the root is available at any size.

Proofs follow RFC 6962 section 2.1.1 (PATH) and 2.1.2 (SUBPROOF); their verification follows
RFC 9162 sections 2.1.3.2 and 2.1.4.2 step by step. Hashes are raw 32-byte ``bytes``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence

from app.evidence.errors import MerkleProofInvalid

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()
_LEAF_PREFIX = b"\x00"
_NODE_PREFIX = b"\x01"


def leaf_hash(data: bytes) -> bytes:
    """``SHA-256(0x00 || data)``."""
    return hashlib.sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """``SHA-256(0x01 || left || right)``."""
    return hashlib.sha256(_NODE_PREFIX + left + right).digest()


class CompactRange:
    """The compact range ``[0, size)`` of an append-only tree: O(log n) state, root at any size."""

    __slots__ = ("_hashes", "_size")

    def __init__(self) -> None:
        self._size = 0
        self._hashes: list[bytes] = []

    @classmethod
    def from_state(cls, size: int, hashes: Sequence[bytes]) -> CompactRange:
        """Rebuild a range persisted as ``(size, hashes)``; ``hashes`` as returned by ``hashes``."""
        if size < 0 or len(hashes) != size.bit_count():
            raise ValueError(f"a compact range of size {size} has {size.bit_count()} hashes")
        if any(len(h) != HASH_SIZE for h in hashes):
            raise ValueError("compact range hashes must be 32 bytes")
        compact = cls()
        compact._size = size
        compact._hashes = list(hashes)
        return compact

    @property
    def size(self) -> int:
        return self._size

    @property
    def hashes(self) -> tuple[bytes, ...]:
        """Perfect-subtree roots covering ``[0, size)``, leftmost (largest) first."""
        return tuple(self._hashes)

    def append(self, leaf: bytes) -> None:
        """Append a *leaf hash* (``leaf_hash(data)``), not the leaf data."""
        if len(leaf) != HASH_SIZE:
            raise ValueError("append takes a 32-byte leaf hash")
        hashes = self._hashes
        hashes.append(leaf)
        n = self._size
        # Each trailing one bit of the old size is a subtree of the new leaf's size: merge it.
        while n & 1:
            right = hashes.pop()
            hashes[-1] = node_hash(hashes[-1], right)
            n >>= 1
        self._size += 1

    def extend(self, leaves: Iterable[bytes]) -> None:
        for leaf in leaves:
            self.append(leaf)

    def root(self) -> bytes:
        """The RFC 6962 root of the leaves appended so far (``EMPTY_ROOT`` when empty)."""
        return fold_root(self._hashes)

    def copy(self) -> CompactRange:
        return CompactRange.from_state(self._size, self._hashes)


def fold_root(subtree_roots: Sequence[bytes]) -> bytes:
    """Root of a tree from its compact range hashes: fold right to left (smaller subtrees first)."""
    if not subtree_roots:
        return EMPTY_ROOT
    root = subtree_roots[-1]
    for left in reversed(subtree_roots[:-1]):
        root = node_hash(left, root)
    return root


def root_from_leaf_hashes(leaf_hashes: Iterable[bytes]) -> bytes:
    """The root of the tree whose leaves have these hashes."""
    compact = CompactRange()
    compact.extend(leaf_hashes)
    return compact.root()


def root_of_leaves(leaves: Iterable[bytes]) -> bytes:
    """The root of the tree over these leaf *data* values."""
    return root_from_leaf_hashes(leaf_hash(leaf) for leaf in leaves)


def _split(n: int) -> int:
    """The largest power of two strictly smaller than ``n`` (``n >= 2``)."""
    return 1 << ((n - 1).bit_length() - 1)


def inclusion_proof(leaf_hashes: Sequence[bytes], index: int) -> list[bytes]:
    """RFC 6962 PATH(index, D[n]) for the tree of ``len(leaf_hashes)`` leaves, leaf side first."""
    if not 0 <= index < len(leaf_hashes):
        raise ValueError(f"leaf index {index} is outside a tree of size {len(leaf_hashes)}")
    proof: list[bytes] = []
    lo, hi = 0, len(leaf_hashes)
    # Walk from the root down, collecting the sibling subtree at each level, then reverse.
    while hi - lo > 1:
        k = _split(hi - lo)
        if index - lo < k:
            proof.append(root_from_leaf_hashes(leaf_hashes[lo + k : hi]))
            hi = lo + k
        else:
            proof.append(root_from_leaf_hashes(leaf_hashes[lo : lo + k]))
            lo += k
    proof.reverse()
    return proof


def consistency_proof(leaf_hashes: Sequence[bytes], size1: int) -> list[bytes]:
    """RFC 6962 PROOF(size1, D[n]) from the tree of ``size1`` leaves to the whole sequence."""
    size2 = len(leaf_hashes)
    if not 0 <= size1 <= size2:
        raise ValueError(f"cannot prove size {size1} consistent with size {size2}")
    if size1 in (0, size2):
        return []
    return _subproof(leaf_hashes, 0, size2, size1, complete=True)


def _subproof(hashes: Sequence[bytes], lo: int, hi: int, m: int, *, complete: bool) -> list[bytes]:
    n = hi - lo
    if m == n:
        return [] if complete else [root_from_leaf_hashes(hashes[lo:hi])]
    k = _split(n)
    if m <= k:
        return [*_subproof(hashes, lo, lo + k, m, complete=complete),
                root_from_leaf_hashes(hashes[lo + k : hi])]
    return [*_subproof(hashes, lo + k, hi, m - k, complete=False),
            root_from_leaf_hashes(hashes[lo : lo + k])]


def _check_hash(value: bytes, what: str) -> None:
    if len(value) != HASH_SIZE:
        raise MerkleProofInvalid(f"{what} is {len(value)} bytes, not {HASH_SIZE}")


def root_from_inclusion_proof(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes]
) -> bytes:
    """RFC 9162 section 2.1.3.2: the root implied by an inclusion proof of leaf hash ``leaf``."""
    if not 0 <= index < size:  # ">=": several implementations get this bound wrong
        raise MerkleProofInvalid(f"leaf index {index} is not below tree size {size}")
    _check_hash(leaf, "leaf hash")
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        _check_hash(p, "proof hash")
        if sn == 0:
            raise MerkleProofInvalid("inclusion proof is longer than the tree is deep")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise MerkleProofInvalid("inclusion proof is shorter than the tree is deep")
    return r


def verify_inclusion(
    index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes
) -> None:
    """Raise ``MerkleProofInvalid`` unless ``proof`` proves leaf hash ``leaf`` at ``index``."""
    _check_hash(root, "root")
    if root_from_inclusion_proof(index, size, leaf, proof) != root:
        raise MerkleProofInvalid("inclusion proof does not lead to the root")


def verify_consistency(
    size1: int, size2: int, proof: Sequence[bytes], root1: bytes, root2: bytes
) -> None:
    """RFC 9162 section 2.1.4.2: raise ``MerkleProofInvalid`` unless the trees are consistent."""
    if not 0 <= size1 <= size2:
        raise MerkleProofInvalid(f"tree size {size1} cannot precede tree size {size2}")
    if size1 == size2 or size1 == 0:
        if proof:
            raise MerkleProofInvalid("a trivial consistency proof must be empty")
        if size1 == size2 and root1 != root2:
            raise MerkleProofInvalid("equal tree sizes with different roots")
        return
    if not proof:
        raise MerkleProofInvalid("empty consistency proof")
    _check_hash(root1, "first root")
    _check_hash(root2, "second root")
    for p in proof:
        _check_hash(p, "proof hash")
    path = [root1, *proof] if size1 & (size1 - 1) == 0 else list(proof)
    fn, sn = size1 - 1, size2 - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise MerkleProofInvalid("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0 or fr != root1 or sr != root2:
        raise MerkleProofInvalid("consistency proof does not lead to both roots")
