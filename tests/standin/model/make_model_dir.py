"""Write the stand-in's model directory: a small REAL tokenizer and the config files.

The router loads its tokenizer from the model path the workers report; the local fleet
mounts this directory at that path (read-only) into every node, as production mounts the
model's NVMe directory. The tokenizer is trained here with the `tokenizers` package on a
built-in text (nothing is downloaded); no weights are written: the stand-in server reads none.

Usage: python make_model_dir.py DIR
"""

from __future__ import annotations

import json
import os
import sys

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


def tokenizer():
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=SPECIAL, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    return tok


def files():
    return {
        'tokenizer.json': tokenizer().to_str(pretty=True),
        'tokenizer_config.json': json.dumps({
            'tokenizer_class': 'PreTrainedTokenizerFast', 'model_max_length': 8192,
            'eos_token': '<|endoftext|>', 'pad_token': '<|endoftext|>',
            'chat_template': CHAT_TEMPLATE}, indent=2),
        'config.json': json.dumps({
            'architectures': ['StandinForCausalLM'], 'model_type': 'standin',
            'note': 'stand-in model directory of the local test fleet: a real tokenizer, no weights'},
            indent=2),
    }


def main(target):
    os.makedirs(target, exist_ok=True)
    for name, text in files().items():
        path = os.path.join(target, name)
        if os.path.exists(path):
            with open(path, encoding='utf-8') as handle:
                if handle.read() == text:
                    continue
        with open(path, 'w', encoding='utf-8') as handle:
            handle.write(text)
        print('wrote', path)
    os.chmod(target, 0o755)


if __name__ == '__main__':
    main(sys.argv[1])
