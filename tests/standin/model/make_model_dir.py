"""Write the stand-in's model directory: a small REAL tokenizer, config files and weights.

The router loads its tokenizer from the model path the workers report; the local fleet
mounts this directory at that path (read-only) into every node, as production mounts the
model's NVMe directory. The tokenizer is trained here with the `tokenizers` package on a
built-in text (nothing is downloaded). The weights are small but real safetensors shards,
laid out like a sharded Hugging Face checkpoint: model-00001-of-00003.safetensors ...
(about 4 MiB each, float16 tensors named like model.layers.0.mlp.up_proj.weight, written
with the `safetensors` package from numpy arrays of a fixed seed) and
model.safetensors.index.json ({"metadata": {"total_size": N}, "weight_map": {tensor: shard}}).
The stand-in server never loads them; they give the directory a real checkpoint's files
and sizes, e.g. to copy, mount and verify.

Beside the directory, DIR.manifest lists every regular file of DIR, one line each, sorted
by name: `SHA256  SIZE  NAME` (lowercase hex digest, size in bytes, two spaces between).

Every byte is deterministic and only files whose content differs are written, each
reported as `wrote PATH` (callers take "wrote" in stdout as a change).

Usage: python make_model_dir.py DIR
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SPECIAL = ['<|endoftext|>', '[gMASK]', '<sop>', '<|system|>', '<|user|>', '<|assistant|>']
CHAT_TEMPLATE = (
    "[gMASK]<sop>{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CORPUS = [
    'The quick brown fox jumps over the lazy dog.',
    'Prefill computes the KV cache; decode streams the tokens.',
    'standin reply from prefill and decode workers of the local fleet',
    'hello world, how are you today? Say hello in one word.',
    'SGLang serves GLM-5.2 FP8 on AMD MI300X nodes with Mooncake over RDMA.',
    '0 1 2 3 4 5 6 7 8 9 ! ? . , ; : - _ ( ) [ ] { } / \\ " \' + = * & % $ # @',
]

# The weights: one decoder layer per shard, the embeddings in the first, the head in the last.
SEED = 52
SHARDS = 3
HIDDEN = 512
KV_HIDDEN = 128  # grouped-query attention: one KV head of 128
INTERMEDIATE = 896
VOCAB = 640  # the tokenizer's 600 entries at most, padded to a multiple of 64
DTYPE = np.float16
INIT_RANGE = 0.02
INDEX = 'model.safetensors.index.json'


def tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


def files():
    """{name: bytes} of the tokenizer and config files."""
    texts = {
        'tokenizer.json': tokenizer().to_str(pretty=True),
        'tokenizer_config.json': json.dumps({
            'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': 8192,
            'eos_token': '<|endoftext|>', 'pad_token': '<|endoftext|>',
            'chat_template': CHAT_TEMPLATE}, indent=2),
        'config.json': json.dumps({
            'architectures': ['StandinForCausalLM'], 'model_type': 'standin',
            'note': 'stand-in model directory of the local test fleet: a real tokenizer; the weights are'
                    ' small real safetensors shards that the stand-in server never loads'},
            indent=2),
    }
    return {name: text.encode('utf-8') for name, text in texts.items()}


def shard_name(number):
    return 'model-%05d-of-%05d.safetensors' % (number, SHARDS)


def layout():
    """[(shard name, [(tensor name, shape)])], in a fixed order."""
    shards = []
    for layer in range(SHARDS):
        prefix = 'model.layers.%d.' % layer
        tensors = [
            (prefix + 'input_layernorm.weight', (HIDDEN,)),
            (prefix + 'self_attn.q_proj.weight', (HIDDEN, HIDDEN)),
            (prefix + 'self_attn.k_proj.weight', (KV_HIDDEN, HIDDEN)),
            (prefix + 'self_attn.v_proj.weight', (KV_HIDDEN, HIDDEN)),
            (prefix + 'self_attn.o_proj.weight', (HIDDEN, HIDDEN)),
            (prefix + 'post_attention_layernorm.weight', (HIDDEN,)),
            (prefix + 'mlp.gate_proj.weight', (INTERMEDIATE, HIDDEN)),
            (prefix + 'mlp.up_proj.weight', (INTERMEDIATE, HIDDEN)),
            (prefix + 'mlp.down_proj.weight', (HIDDEN, INTERMEDIATE)),
        ]
        if layer == 0:
            tensors.insert(0, ('model.embed_tokens.weight', (VOCAB, HIDDEN)))
        if layer == SHARDS - 1:
            tensors += [('model.norm.weight', (HIDDEN,)), ('lm_head.weight', (VOCAB, HIDDEN))]
        shards.append((shard_name(layer + 1), tensors))
    return shards


def tensor(number, name, shape):
    """The deterministic values of tensor NUMBER: norms are ones, the rest uniform in +-INIT_RANGE.

    The raw output of the PCG64 bit generator, seeded from (SEED, NUMBER), is stable across
    numpy versions (unlike the distributions built on it), so the bytes are too.
    """
    if name.endswith('norm.weight'):
        return np.ones(shape, dtype=DTYPE)
    size = int(np.prod(shape))
    raw = np.random.PCG64(np.random.SeedSequence([SEED, number])).random_raw(size)
    unit = (raw >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))  # [0, 1)
    return ((unit * 2.0 - 1.0) * INIT_RANGE).astype(DTYPE).reshape(shape)


def shards():
    """[(shard name, {tensor name: array})]."""
    number = 0
    result = []
    for shard, names in layout():
        arrays = {}
        for name, shape in names:
            arrays[name] = tensor(number, name, shape)
            number += 1
        result.append((shard, arrays))
    return result


def index(all_shards):
    """The index of a sharded checkpoint; total_size is the bytes of all tensors."""
    weight_map = {name: shard for shard, arrays in all_shards for name in arrays}
    total = sum(int(array.nbytes) for _shard, arrays in all_shards for array in arrays.values())
    return json.dumps({'metadata': {'total_size': total}, 'weight_map': dict(sorted(weight_map.items()))},
                      indent=2).encode('utf-8')


def read(path):
    try:
        with open(path, 'rb') as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def write(path, data):
    """Write data to path unless it already holds exactly that; report a write."""
    if read(path) == data:
        return
    with open(path, 'wb') as handle:
        handle.write(data)
    print('wrote', path)


def write_shard(path, arrays):
    """Serialise one shard with safetensors beside path; keep it only if it differs."""
    temporary = os.path.join(os.path.dirname(path), '.%s.tmp' % os.path.basename(path))
    try:
        # One metadata key only: safetensors keeps it in a hash map, whose order varies by process.
        save_file(arrays, temporary, metadata={'format': 'pt'})
        data = read(temporary)
        if read(path) == data:
            return
        os.chmod(temporary, 0o644)  # safetensors creates it private; the fleet's nodes read it
        os.replace(temporary, path)
        print('wrote', path)
    finally:
        if os.path.exists(temporary):
            os.remove(temporary)


def manifest(target):
    """`SHA256  SIZE  NAME` per regular file of target, sorted by name."""
    lines = []
    for entry in sorted(os.scandir(target), key=lambda e: e.name):
        if entry.is_file(follow_symlinks=False):
            data = read(entry.path)
            lines.append('%s  %d  %s\n' % (hashlib.sha256(data).hexdigest(), len(data), entry.name))
    return ''.join(lines).encode('utf-8')


def manifest_path(target):
    return os.path.abspath(target) + '.manifest'


def main(target):
    os.makedirs(target, exist_ok=True)
    for name, data in files().items():
        write(os.path.join(target, name), data)
    all_shards = shards()
    for shard, arrays in all_shards:
        write_shard(os.path.join(target, shard), arrays)
    write(os.path.join(target, INDEX), index(all_shards))
    os.chmod(target, 0o755)
    write(manifest_path(target), manifest(target))


if __name__ == '__main__':
    main(sys.argv[1])
