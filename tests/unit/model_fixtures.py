# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Small model directories in the SGLang / Hugging Face layout, written byte by byte.

The safetensors files are written by hand (8-byte little-endian header length, JSON header,
data), so the tests need neither the safetensors package nor torch. Manifests are hashed
here with hashlib and formatted with ``format_manifest``.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import socket
import struct
import time

from ansible_collections.mindverse.sglang_pd.plugins.module_utils._model_weights import format_manifest

DTYPE_SIZES = {'BF16': 2, 'F16': 2, 'F32': 4, 'I64': 8}
CONFIG = {'architectures': ['Glm4MoeForCausalLM'], 'model_type': 'glm4_moe', 'hidden_size': 64,
          'num_hidden_layers': 2, 'vocab_size': 256, 'torch_dtype': 'bfloat16'}
TOKENIZER = {'version': '1.0', 'model': {'type': 'BPE', 'vocab': {'a': 0, 'b': 1}, 'merges': []}}
TOKENIZER_CONFIG = {'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': 4096}


def safetensors_bytes(tensors, metadata=None):
    """A whole safetensors file: ``tensors`` maps name -> (dtype, shape, data bytes)."""
    header = {}
    data = bytearray()
    for name, (dtype, shape, blob) in tensors.items():
        header[name] = {'dtype': dtype, 'shape': list(shape), 'data_offsets': [len(data), len(data) + len(blob)]}
        data += blob
    if metadata is not None:
        header['__metadata__'] = metadata
    raw = json.dumps(header, separators=(',', ':')).encode('utf-8')
    raw += b' ' * (-len(raw) % 8)  # the format pads the header to 8 bytes with spaces
    return struct.pack('<Q', len(raw)) + raw + bytes(data)


def random_tensor(rnd, dtype, shape):
    count = DTYPE_SIZES[dtype]
    for dim in shape:
        count *= dim
    return (dtype, shape, rnd.randbytes(count))


def write_bytes(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, 'wb') as handle:
        handle.write(data)
    return path


def write_json(path, value):
    return write_bytes(path, json.dumps(value, indent=2).encode('utf-8'))


def shard_name(number, count):
    return 'model-%05d-of-%05d.safetensors' % (number, count)


def make_model_dir(path, shards=3, rows=64, seed='model', single=False, extra_files=None):
    """Write a model directory; return {name: bytes} of every file written.

    Each shard holds two BF16 tensors of ``rows`` x 64 (``rows`` * 256 bytes of data). With
    ``single`` there is one ``model.safetensors`` and no index. ``extra_files`` maps more
    names (may contain ``/``) to bytes.
    """
    rnd = random.Random(seed)
    files = {
        'config.json': json.dumps(CONFIG, indent=2).encode(),
        'tokenizer.json': json.dumps(TOKENIZER).encode(),
        'tokenizer_config.json': json.dumps(TOKENIZER_CONFIG).encode(),
    }
    if single:
        files['model.safetensors'] = safetensors_bytes({
            'model.embed_tokens.weight': random_tensor(rnd, 'BF16', (rows, 64)),
            'lm_head.weight': random_tensor(rnd, 'BF16', (rows, 64)),
        }, metadata={'format': 'pt'})
    else:
        weight_map = {}
        for number in range(1, shards + 1):
            name = shard_name(number, shards)
            tensors = {
                'model.layers.%d.mlp.weight' % number: random_tensor(rnd, 'BF16', (rows, 64)),
                'model.layers.%d.attn.weight' % number: random_tensor(rnd, 'BF16', (rows, 64)),
            }
            weight_map.update((tensor, name) for tensor in tensors)
            files[name] = safetensors_bytes(tensors, metadata={'format': 'pt'})
        files['model.safetensors.index.json'] = json.dumps(
            {'metadata': {'total_size': sum(len(f) for n, f in files.items() if n.endswith('.safetensors'))},
             'weight_map': weight_map}, indent=2).encode()
    files.update(extra_files or {})
    for name, data in files.items():
        write_bytes(os.path.join(path, *name.split('/')), data)
    return files


def manifest_of(files):
    """Manifest text of {name: bytes}, hashed here with hashlib."""
    return format_manifest(dict((name, (hashlib.sha256(data).hexdigest(), len(data))) for name, data in files.items()))


def truncate(path, size):
    with open(path, 'r+b') as handle:
        handle.truncate(size)


def bump_mtime(path, seconds=10):
    """Move the file's mtime (content unchanged), as a rewrite would."""
    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + seconds * 1000000000))


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on (for a test server or rsync daemon)."""
    sock = socket.socket()
    sock.bind(('127.0.0.1', 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


def wait_for_port(port, timeout=10.0):
    """Wait until something listens on 127.0.0.1:PORT."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(('127.0.0.1', port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError('nothing listens on 127.0.0.1:%d' % port)
