#!/usr/bin/env python3
"""Trains the small tokenizers of the tokenizer parity tests and writes what the `tokenizers`
package makes of the test strings.

    pip install tokenizers==0.23.3
    python3 tests/text/tokenizers/make_tokenizers.py      # rewrites the files next to this script

Deterministic: the corpus and the trainers' settings are fixed, and the trainers break ties by
order. Writes, per tokenizer <name> (gpt2, llama3, llama2, metaspace, unknown_and_stripped, other_parts):
  <name>.json            the tokenizer.json file
  <name>_expected.json   {"vocab_size": N, "cases": [{"text", "ids", "ids_with_special",
                          "decoded", "decoded_skipping_special", "streamed"}, ...]} for every
                          string of test_strings.json: encode(text, add_special_tokens=False /
                          True), decode(ids_with_special, skip_special_tokens=False / True), and
                          what DecodeStream.step gives for each of ids_with_special (null: nothing
                          yet).
"""
import json
import pathlib

import tokenizers
from tokenizers.decoders import DecodeStream
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

HERE = pathlib.Path(__file__).resolve().parent
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def corpus_lines():
    return (HERE / "corpus.txt").read_text(encoding="utf-8").splitlines(keepends=True)


def gpt2():
    """Byte-level BPE as GPT-2's: the ByteLevel pre-tokenizer with its own regex, merges written
    as "a b" strings (the older format), <|endoftext|> added after the vocabulary."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(vocab_size=700, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_special_tokens(["<|endoftext|>"])
    data = json.loads(tok.to_str())
    data["model"]["merges"] = [" ".join(pair) for pair in data["model"]["merges"]]
    return data


def llama3():
    """Byte-level BPE as LLaMA-3's: a Split pre-tokenizer with its regex (digits in groups of 1-3),
    then ByteLevel without a regex; ignore_merges; a BOS added by TemplateProcessing."""
    tok = Tokenizer(models.BPE(ignore_merges=True))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=900, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus_lines(), trainer)
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])
    tok.add_tokens(["<|reserved_0|>"])  # added, not special: kept by skip_special_tokens
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)])])
    return json.loads(tok.to_str())


def sentencepiece_model():
    """SentencePiece-style BPE with byte fallback, as LLaMA-2's: <unk> <s> </s>, then the 256
    <0xNN> byte tokens, then the learned pieces. Trained on words that start with "▁";
    characters the corpus lacks (most CJK, emoji) fall back to bytes."""
    tok = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="always", split=True)
    trainer = trainers.BpeTrainer(vocab_size=600, show_progress=False, special_tokens=["<unk>", "<s>", "</s>"])
    tok.train_from_iterator(corpus_lines(), trainer)
    data = json.loads(tok.to_str())
    learned = sorted(data["model"]["vocab"].items(), key=lambda item: item[1])
    specials = [token for token, _ in learned[:3]]
    assert specials == ["<unk>", "<s>", "</s>"], specials
    pieces = specials + [f"<0x{b:02X}>" for b in range(256)] + [token for token, _ in learned[3:]]
    data["model"]["vocab"] = {token: i for i, token in enumerate(pieces)}
    for added in data["added_tokens"]:
        added["id"] = data["model"]["vocab"][added["content"]]
    return data


def with_template(data, bos_id):
    data["post_processor"] = json.loads(processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B:1", special_tokens=[("<s>", bos_id)]).__getstate__())
    return data


def component(obj):
    return json.loads(obj.__getstate__())


def llama2():
    """LLaMA-2 / TinyLlama: the Prepend + Replace normalizer, no pre-tokenizer, and the decoder
    Replace, ByteFallback, Fuse, Strip."""
    data = sentencepiece_model()
    data["normalizer"] = component(normalizers.Sequence([normalizers.Prepend("\u2581"),
                                                         normalizers.Replace(" ", "\u2581")]))
    data["pre_tokenizer"] = None
    data["decoder"] = component(decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(),
                                                   decoders.Fuse(), decoders.Strip(" ", 1, 0)]))
    return with_template(data, data["model"]["vocab"]["<s>"])


def metaspace():
    """The same model behind the Metaspace pre-tokenizer (prepend_scheme "first", no split) and
    the Metaspace decoder, as newer conversions of LLaMA-2-style tokenizers write it."""
    data = sentencepiece_model()
    data["normalizer"] = None
    data["pre_tokenizer"] = component(pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first",
                                                               split=False))
    data["decoder"] = component(decoders.Sequence([
        decoders.Metaspace(replacement="\u2581", prepend_scheme="first", split=False),
        decoders.ByteFallback(), decoders.Fuse()]))
    return with_template(data, data["model"]["vocab"]["<s>"])


def unknown_and_stripped():
    """The LLaMA-2-like tokenizer without byte fallback (characters it lacks become one fused
    <unk>), with added tokens of each kind: "<mask>" taking the whitespace on its left (lstrip),
    "[SEP]" on its right (rstrip), "end" matched only as a word of its own (single_word), and
    "dog cat" matched in the normalized text (normalized)."""
    data = llama2()
    data["model"]["byte_fallback"] = False
    tok = Tokenizer.from_str(json.dumps(data))
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, normalized=False, special=True)])
    tok.add_tokens([AddedToken("[SEP]", rstrip=True, normalized=False), AddedToken("end", single_word=True, normalized=False),
                    AddedToken("dog cat", normalized=True)])
    return json.loads(tok.to_str())


def other_parts():
    """The GPT-2-like model behind the parts no common tokenizer combines, to cover each: a regex
    Replace and Prepend normalizer, Digits (runs and single), Split with every behaviour, by a
    regex or a string, inverted once, and the decoders Replace and Strip after ByteLevel."""
    tok = Tokenizer.from_str(json.dumps(gpt2()))
    tok.normalizer = normalizers.Sequence([normalizers.Replace(Regex(r"\d{4,}"), "####"), normalizers.Prepend("\u00a1")])
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=False),
        pre_tokenizers.Split(Regex("[aeiou]"), behavior="merged_with_next"),
        pre_tokenizers.Split("-", behavior="merged_with_previous"),
        pre_tokenizers.Split(Regex(r"\s+"), behavior="removed"),
        pre_tokenizers.Split(Regex("[^x]+"), behavior="contiguous", invert=True),
        pre_tokenizers.Split(Regex("[.,;]"), behavior="isolated"),
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=False)])
    tok.decoder = decoders.Sequence([decoders.ByteLevel(), decoders.Replace("\u00a1", ""), decoders.Strip(" ", 1, 0)])
    return json.loads(tok.to_str())


def expected(tok, texts):
    cases = []
    for text in texts:
        ids = tok.encode(text, add_special_tokens=False).ids
        with_special = tok.encode(text, add_special_tokens=True).ids
        stream = DecodeStream(skip_special_tokens=False)
        cases.append({"text": text, "ids": ids, "ids_with_special": with_special,
                      "decoded": tok.decode(with_special, skip_special_tokens=False),
                      "decoded_skipping_special": tok.decode(with_special, skip_special_tokens=True),
                      "streamed": [stream.step(tok, i) for i in with_special]})
    return {"tokenizers_version": tokenizers.__version__, "vocab_size": tok.get_vocab_size(with_added_tokens=True),
            "cases": cases}


def write_expected(path, data):
    """One case per line, so that a change shows as the lines of the cases it changes."""
    head = {key: value for key, value in data.items() if key != "cases"}
    lines = [json.dumps(case, ensure_ascii=False) for case in data["cases"]]
    text = json.dumps(head, ensure_ascii=False)[:-1] + ', "cases": [\n' + ",\n".join(lines) + "\n]}\n"
    path.write_text(text, encoding="utf-8")


def main():
    texts = json.loads((HERE / "test_strings.json").read_text(encoding="utf-8"))
    for name, build in [("gpt2", gpt2), ("llama3", llama3), ("llama2", llama2), ("metaspace", metaspace),
                        ("unknown_and_stripped", unknown_and_stripped), ("other_parts", other_parts)]:
        text = json.dumps(build(), ensure_ascii=False, indent=1) + "\n"
        (HERE / f"{name}.json").write_text(text, encoding="utf-8")
        tok = Tokenizer.from_file(str(HERE / f"{name}.json"))  # what a user's program would read
        write_expected(HERE / f"{name}_expected.json", expected(tok, texts))
        print(f"{name}: vocab {tok.get_vocab_size(True)}, {len(text)} bytes")


if __name__ == "__main__":
    main()
