"""RFC 6962 / RFC 9162 hashing and proofs against published vectors.

Sources (Apache-2.0), github.com/transparency-dev/merkle:
- ``rfc6962/rfc6962_test.go``: empty root, empty leaf, leaf ``L123456``, node ``N123``/``N456``;
- ``testonly/constants.go``: the 8 leaf inputs, every node hash, the root at every size 0..8 and
  the compact range at every size;
- ``proof/verify_test.go``: the inclusion and consistency proof tables and the corruption probes
  (``corruptInclusionProof`` / ``corruptConsistencyProof``) replayed here;
- ``testdata/inclusion/1/*.json``, ``testdata/consistency/1/happy-path.json``: verbatim vectors.
"""

from __future__ import annotations

import base64
import hashlib
import json
from typing import Any

import pytest

from app.evidence.errors import MerkleProofInvalid
from app.evidence.merkle import (
    EMPTY_ROOT,
    CompactRange,
    consistency_proof,
    inclusion_proof,
    leaf_hash,
    node_hash,
    root_from_inclusion_proof,
    root_from_leaf_hashes,
    root_of_leaves,
    verify_consistency,
    verify_inclusion,
)

h = bytes.fromhex
LEAVES = [h(x) for x in ("", "00", "10", "2021", "3031", "40414243", "5051525354555657",
                         "606162636465666768696a6b6c6d6e6f")]
NODE_HASHES = [
    [h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
     h("96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7"),
     h("0298d122906dcfc10892cb53a73992fc5b9f493ea4c9badb27b791b4127a7fe7"),
     h("07506a85fd9dd2f120eb694f86011e5bb4662e5c415a62917033d4a9624487e7"),
     h("bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b"),
     h("4271a26be0d8a84f0bd54c8c302e7cb3a3b5d1fa6780a40bcce2873477dab658"),
     h("b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f"),
     h("46f6ffadd3d06a09ff3c5860d2755c8b9819db7df44251788c7d8e3180de8eb1")],
    [h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
     h("5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e"),
     h("0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a"),
     h("ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0")],
    [h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
     h("6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4")],
    [h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328")],
]
ROOTS = [  # by tree size 0..8
    h("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
    h("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"),
    h("fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"),
    h("aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77"),
    h("d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7"),
    h("4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4"),
    h("76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef"),
    h("ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c"),
    h("5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328"),
]
NH = NODE_HASHES
COMPACT = [[], [NH[0][0]], [NH[1][0]], [NH[1][0], NH[0][2]], [NH[2][0]], [NH[2][0], NH[0][4]],
           [NH[2][0], NH[1][2]], [NH[2][0], NH[1][2], NH[0][6]], [NH[3][0]]]
# (1-based leaf, tree size, proof) and (size1, size2, proof) from proof/verify_test.go.
INCLUSION = [
    (1, 8, [NH[0][1], NH[1][1], NH[2][1]]),
    (6, 8, [NH[0][4], NH[1][3], NH[2][0]]),
    (3, 3, [NH[1][0]]),
    (2, 5, [NH[0][0], NH[1][1], NH[0][4]]),
]
CONSISTENCY = [
    (1, 8, [NH[0][1], NH[1][1], NH[2][1]]),
    (6, 8, [NH[1][2], NH[1][3], NH[2][0]]),
    (2, 5, [NH[1][1], NH[0][4]]),
    (6, 7, [NH[1][2], NH[0][6], NH[2][0]]),
]
SOME_HASH = h("abacaba000000000000000000000000000000000000000000060061e00123456")


def test_rfc6962_hasher_vectors() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56")
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb")


def test_domain_separation() -> None:
    a, b = leaf_hash(b"Hello"), leaf_hash(b"World")
    assert a != b and node_hash(a, b) != leaf_hash(a + b) and node_hash(a, b) != node_hash(b, a)


@pytest.mark.parametrize("size", range(9))
def test_root_at_every_size(size: int) -> None:
    assert root_of_leaves(LEAVES[:size]) == ROOTS[size]


def test_compact_range_matches_published_compact_trees_at_every_size() -> None:
    compact = CompactRange()
    assert compact.root() == EMPTY_ROOT
    for size, leaf in enumerate(LEAVES, start=1):
        compact.append(leaf_hash(leaf))
        assert list(compact.hashes) == COMPACT[size]
        assert compact.root() == ROOTS[size]
    assert [leaf_hash(x) for x in LEAVES] == NODE_HASHES[0]


def test_compact_range_state_round_trip() -> None:
    compact = CompactRange()
    compact.extend(leaf_hash(bytes([i])) for i in range(13))
    again = CompactRange.from_state(*_state(compact))
    again.append(leaf_hash(b"x"))
    compact.append(leaf_hash(b"x"))
    assert again.root() == compact.root() and again.size == 14
    with pytest.raises(ValueError):
        CompactRange.from_state(13, compact.hashes[:1])
    with pytest.raises(ValueError):
        compact.append(b"short")


def _state(compact: CompactRange) -> tuple[int, tuple[bytes, ...]]:
    return compact.size, compact.hashes


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_inclusion_proof_vectors(leaf: int, size: int, proof: list[bytes]) -> None:
    hashes = [leaf_hash(x) for x in LEAVES[:size]]
    assert inclusion_proof(hashes, leaf - 1) == proof
    verify_inclusion(leaf - 1, size, hashes[leaf - 1], proof, ROOTS[size])


def _inclusion_probes(index: int, size: int, proof: list[bytes], root: bytes,
                      leaf: bytes) -> list[tuple[int, int, bytes, list[bytes], bytes]]:
    """``corruptInclusionProof`` of proof/verify_test.go."""
    probes = [
        (index - 1, size, leaf, proof, root), (index + 1, size, leaf, proof, root),
        (index ^ 2, size, leaf, proof, root), (index, size * 2, leaf, proof, root),
        (index, size // 2, leaf, proof, root), (index, size, b"WrongLeaf", proof, root),
        (index, size, leaf, proof, EMPTY_ROOT), (index, size, leaf, proof, SOME_HASH),
        (index, size, leaf, [*proof, b""], root), (index, size, leaf, [*proof, root], root),
        (index, size, leaf, [b"", *proof], root), (index, size, leaf, [root, *proof], root),
    ]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 8]) + wrong[i][1:]
        probes.append((index, size, leaf, wrong, root))
    if proof:
        probes.append((index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append((index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root))
    return probes


@pytest.mark.parametrize(("leaf", "size", "proof"), INCLUSION)
def test_corrupted_inclusion_proofs_fail(leaf: int, size: int, proof: list[bytes]) -> None:
    lh = leaf_hash(LEAVES[leaf - 1])
    for index, tree_size, leaf_h, path, root in _inclusion_probes(leaf - 1, size, proof,
                                                                   ROOTS[size], lh):
        with pytest.raises(MerkleProofInvalid):
            verify_inclusion(index, tree_size, leaf_h, path, root)


@pytest.mark.parametrize(("index", "size"), [(0, 0), (1, 0), (2, 1), (1, 1), (8, 8), (9, 8)])
def test_index_at_or_beyond_size_fails(index: int, size: int) -> None:
    with pytest.raises(MerkleProofInvalid, match="not below tree size"):
        root_from_inclusion_proof(index, size, SOME_HASH, [])
    with pytest.raises(ValueError):
        inclusion_proof([leaf_hash(x) for x in LEAVES[:size]], index)


def test_single_entry_tree() -> None:
    leaf = leaf_hash(b"data")
    verify_inclusion(0, 1, leaf, [], leaf)
    for root, lh in ((leaf, b""), (b"", leaf), (b"", b"")):
        with pytest.raises(MerkleProofInvalid):
            verify_inclusion(0, 1, lh, [], root)


# testdata/inclusion/1/happy-path.json, leafIdx-+-1.json, treeSize-div-2.json (verbatim).
_INCLUSION_JSON = [
    '{"leafIdx":0,"treeSize":8,"root":"XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",'
    '"leafHash":"bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=","proof":['
    '"lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=","Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",'
    '"a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="],"desc":"happy path","wantErr":false}',
    '{"leafIdx":1,"treeSize":8,"root":"XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",'
    '"leafHash":"bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=","proof":['
    '"lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=","Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",'
    '"a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="],"desc":"leafIdx + 1","wantErr":true}',
    '{"leafIdx":0,"treeSize":4,"root":"XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=",'
    '"leafHash":"bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=","proof":['
    '"lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=","Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",'
    '"a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ="],"desc":"treeSize div 2","wantErr":true}',
]


@pytest.mark.parametrize("text", _INCLUSION_JSON)
def test_transparency_dev_inclusion_json_vectors(text: str) -> None:
    v: dict[str, Any] = json.loads(text)
    index, size = int(v["leafIdx"]), int(v["treeSize"])
    leaf, root = base64.b64decode(v["leafHash"]), base64.b64decode(v["root"])
    proof = [base64.b64decode(p) for p in v["proof"]]
    if v["wantErr"]:
        with pytest.raises(MerkleProofInvalid):
            verify_inclusion(index, size, leaf, proof, root)
    else:
        verify_inclusion(index, size, leaf, proof, root)


def test_transparency_dev_consistency_json_vector() -> None:
    # testdata/consistency/1/happy-path.json
    root1 = base64.b64decode("bjQLnP+zepicpUTmu3gKLHiQHT+zNzh2hRGjBhevoB0=")
    root2 = base64.b64decode("XcnaeacGWamtVZy3Ad7ZoqudgjqtL0lgz+Nw7/RgQyg=")
    proof = [base64.b64decode(p) for p in ("lqKW0iTyhcZ77pPDD4owkVfw2qNdxbh+QQt4YwoJz8c=",
                                            "Xwg/ChozygdqlSeYMlgNs+DvRYS9/x9UyKNg9Q3jAx4=",
                                            "a0eq8p7jwq+a+Im8H7klTavTEXfxYjLdaqsDXKOb9uQ=")]
    verify_consistency(1, 8, proof, root1, root2)
    assert (root1, root2) == (ROOTS[1], ROOTS[8])


@pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
def test_consistency_proof_vectors(size1: int, size2: int, proof: list[bytes]) -> None:
    hashes = [leaf_hash(x) for x in LEAVES[:size2]]
    assert consistency_proof(hashes, size1) == proof
    verify_consistency(size1, size2, proof, ROOTS[size1], ROOTS[size2])


@pytest.mark.parametrize(("size1", "size2", "proof"), CONSISTENCY)
def test_corrupted_consistency_proofs_fail(size1: int, size2: int, proof: list[bytes]) -> None:
    r1, r2 = ROOTS[size1], ROOTS[size2]
    probes = [  # corruptConsistencyProof of proof/verify_test.go
        (size1 - 1, size2, r1, r2, proof), (size1 + 1, size2, r1, r2, proof),
        (size1 ^ 2, size2, r1, r2, proof), (size1, size2 * 2, r1, r2, proof),
        (size1, size2 // 2, r1, r2, proof), (size1, size2, b"WrongRoot", r2, proof),
        (size1, size2, r1, b"WrongRoot", proof), (size1, size2, r2, r1, proof),
        (size1, size2, r1, r2, []), (size1, size2, r1, r2, [*proof, b""]),
        (size1, size2, r1, r2, [*proof, r1]), (size1, size2, r1, r2, [*proof, r2]),
        (size1, size2, r1, r2, [b"", *proof]), (size1, size2, r1, r2, [r1, *proof]),
        (size1, size2, r1, r2, [r2, *proof]), (size1, size2, r1, r2, [proof[0], *proof]),
        (size1, size2, r1, r2, proof[:-1]),
    ]
    for i in range(len(proof)):
        wrong = list(proof)
        wrong[i] = bytes([wrong[i][0] ^ 16]) + wrong[i][1:]
        probes.append((size1, size2, r1, r2, wrong))
    for s1, s2, a, b, path in probes:
        with pytest.raises(MerkleProofInvalid):
            verify_consistency(s1, s2, path, a, b)


def test_trivial_consistency_cases() -> None:
    some, other = hashlib.sha256(b"1").digest(), hashlib.sha256(b"2").digest()
    verify_consistency(0, 0, [], some, some)
    verify_consistency(0, 1, [], some, other)
    verify_consistency(1, 1, [], other, other)
    cases: list[tuple[int, int, list[bytes], bytes, bytes]] = [
        (1, 1, [], some, other), (1, 0, [], some, other), (2, 1, [], some, other),
        (1, 2, [], some, other), (0, 1, [EMPTY_ROOT], EMPTY_ROOT, EMPTY_ROOT)]
    for size1, size2, proof, root1, root2 in cases:
        with pytest.raises(MerkleProofInvalid):
            verify_consistency(size1, size2, proof, root1, root2)


def test_every_proof_of_trees_up_to_33_leaves_round_trips() -> None:
    for n in range(1, 34):
        hashes = [leaf_hash(i.to_bytes(2, "big")) for i in range(n)]
        root = root_from_leaf_hashes(hashes)
        for i in range(n):
            verify_inclusion(i, n, hashes[i], inclusion_proof(hashes, i), root)
        for m in range(n + 1):
            proof = consistency_proof(hashes, m)
            verify_consistency(m, n, proof, root_from_leaf_hashes(hashes[:m]), root)
