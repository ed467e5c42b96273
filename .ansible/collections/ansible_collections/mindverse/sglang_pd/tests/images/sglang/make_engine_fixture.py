"""Write a deterministic stand-in for the Mooncake engine .so (a fixture, not a library)."""
import hashlib
import sys


def main() -> None:
    """Write 1 MiB of bytes derived from the build id to the given path."""
    build_id, path = sys.argv[1], sys.argv[2]
    block = hashlib.sha256(f"mooncake-engine-fixture-{build_id}".encode()).digest()
    with open(path, "wb") as out:
        out.write(b"\x7fELF-fixture\n")
        for i in range(32768):
            out.write(hashlib.sha256(block + i.to_bytes(4, "big")).digest())


if __name__ == "__main__":
    main()
