"""tokenizer_py: text preprocessing for a text model, in Python's standard library only.

TEXT (BYTES, UTF-8, one string per batch row) -> TOKENS (BYTES), IDS (INT64) and LENGTH (INT32):
each text is normalised as uncased BERT-style tokenizers do (Unicode NFKC, lower case, accents
stripped: NFD without combining marks), split into words (runs of letters, digits and `_`) and single
punctuation or symbol characters, truncated to `max_tokens`, and looked up in the model's vocabulary
(one token a line, its line number its id; `[PAD]` and `[UNK]` are required), read at load from the
model's version folder, granted read-only at /model by `sandbox.model_dir: "read_only"`. The rows of
a request are padded to its longest with `[PAD]`; LENGTH says how many tokens are real.

Model parameters: `vocab` (file name in the version folder, default vocab.txt), `max_tokens`
(default 32). Request parameter `max_tokens` (an integer, 1 to 512) overrides it. The response
parameter `truncated` counts the rows cut short. A text that is not UTF-8 fails its request only.
"""
import re
import unicodedata

import nereus_sdk as nereus
from nereus_sdk import DataType

WORD_OR_SYMBOL = re.compile(r"\w+|[^\w\s]")
VOCAB = {}
PAD, UNK = "[PAD]", "[UNK]"
MAX_TOKENS = 32


def normalize(text):
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(c for c in unicodedata.normalize("NFD", text) if unicodedata.category(c) != "Mn")
    return unicodedata.normalize("NFC", text)


def tokenize(text, limit):
    tokens = WORD_OR_SYMBOL.findall(normalize(text))
    return tokens[:limit], len(tokens) > limit


def max_tokens_of(request):
    limit = request.parameters.get("max_tokens", MAX_TOKENS)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 512:
        raise nereus.RequestError(f"parameter 'max_tokens' must be an integer from 1 to 512, not {limit!r}")
    return limit


class Lifecycle(nereus.Backend):
    def setup_model(self, model):
        global MAX_TOKENS
        MAX_TOKENS = int(nereus.config_parameter(model, "max_tokens") or MAX_TOKENS)
        path = "/model/" + (nereus.config_parameter(model, "vocab") or "vocab.txt")
        with open(path, encoding="utf-8") as f:
            for line in f:
                VOCAB.setdefault(line.rstrip("\n"), len(VOCAB))
        if PAD not in VOCAB or UNK not in VOCAB:
            raise ValueError(f"{path} must hold the tokens {PAD} and {UNK}")
        nereus.info(f"tokenizer_py: {len(VOCAB)} tokens from {path}, at most {MAX_TOKENS} a text")

    def handle(self, request):
        limit = max_tokens_of(request)
        text = request.input("TEXT")
        rows, truncated = [], 0
        for i, raw in enumerate(nereus.bytes_elements(text)):
            try:
                tokens, cut = tokenize(raw.decode("utf-8"), limit)
            except UnicodeDecodeError as e:
                raise nereus.RequestError(f"TEXT[{i}] is not UTF-8: {e.reason} at byte {e.start}") from None
            rows.append(tokens)
            truncated += cut
        width = max([len(r) for r in rows] + [1])
        padded = [t for r in rows for t in r + [PAD] * (width - len(r))]
        shape = [len(rows), width]
        outputs = []
        if request.wants("TOKENS"):
            outputs.append(nereus.bytes_tensor("TOKENS", shape, padded))
        if request.wants("IDS"):
            outputs.append(nereus.tensor("IDS", shape, DataType.INT64, [VOCAB.get(t, VOCAB[UNK]) for t in padded]))
        if request.wants("LENGTH"):
            outputs.append(nereus.tensor("LENGTH", [len(rows), 1], DataType.INT32, [len(r) for r in rows]))
        return outputs, [nereus.parameter("truncated", truncated)]
