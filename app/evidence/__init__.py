"""Evidence: the tamper-evident prediction log, its signed checkpoint, the signed report, verify.

Pure library code with no I/O beyond the files and stores handed to it:

- ``jcs``            RFC 8785 canonical JSON bytes (what every record and payload is hashed as)
- ``merkle``         RFC 6962 / RFC 9162 tree hashing, compact range, inclusion/consistency proofs
- ``prediction_log`` the per-run append-only ``predictions.jsonl`` log
- ``checkpoint``     C2SP signed-note checkpoints signed with the *log* key
- ``keys``           Ed25519 keys, RFC 7638 thumbprints, the key ring and its JWKS
- ``dsse``           DSSE v1 envelopes (PAE, sign, verify)
- ``report``         the in-toto Statement v1 BenchmarkReport signed with the *report* key
- ``verify``         offline verification of a report against an archive and a JWKS
- ``cli``            ``future-ts verify`` (prints each check, exit 0/1/2)
"""
