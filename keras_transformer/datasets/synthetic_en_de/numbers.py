"""Numbers as words: English (British) and German cardinals 0-9999, and
ordinals with German case endings."""


def check_int(value, low, high, name):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


EN_SMALL = (
    "zero one two three four five six seven eight nine ten eleven twelve "
    "thirteen fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_EN_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty",
            7: "seventy", 8: "eighty", 9: "ninety"}

_DE_UNITS = "null eins zwei drei vier fünf sechs sieben acht neun".split()
_DE_TEENS = {10: "zehn", 11: "elf", 12: "zwölf", 13: "dreizehn",
             14: "vierzehn", 15: "fünfzehn", 16: "sechzehn", 17: "siebzehn",
             18: "achtzehn", 19: "neunzehn"}
_DE_TENS = {2: "zwanzig", 3: "dreißig", 4: "vierzig", 5: "fünfzig",
            6: "sechzig", 7: "siebzig", 8: "achtzig", 9: "neunzig"}


def _english_below_100(n):
    if n < 20:
        return EN_SMALL[n]
    tens, unit = divmod(n, 10)
    return _EN_TENS[tens] + (f"-{EN_SMALL[unit]}" if unit else "")


def english_cardinal(n):
    """0-9999 in British English words: "two thousand three hundred and forty-four"."""
    check_int(n, 0, 9999, "n")
    if n == 0:
        return "zero"
    thousands, rest = divmod(n, 1000)
    hundreds, rest = divmod(rest, 100)
    words = []
    if thousands:
        words.append(f"{EN_SMALL[thousands]} thousand")
    if hundreds:
        words.append(f"{EN_SMALL[hundreds]} hundred")
    if rest:
        if words:
            words.append("and")
        words.append(_english_below_100(rest))
    return " ".join(words)


def _german_below_100(n):
    if n < 10:
        return _DE_UNITS[n]
    if n < 20:
        return _DE_TEENS[n]
    tens, unit = divmod(n, 10)
    if not unit:
        return _DE_TENS[tens]
    # Inside a compound "eins" loses its s: einundzwanzig.
    unit_word = "ein" if unit == 1 else _DE_UNITS[unit]
    return f"{unit_word}und{_DE_TENS[tens]}"


def german_cardinal(n):
    """0-9999 as one German word: 21 einundzwanzig, 101 einhunderteins.

    The convention is "einhundert"/"eintausend" (not bare "hundert"); a
    final 1 is "eins" (einhunderteins), a 1 before "hundert", "tausend" or
    "und" is "ein".
    """
    check_int(n, 0, 9999, "n")
    if n == 0:
        return "null"
    thousands, rest = divmod(n, 1000)
    hundreds, rest = divmod(rest, 100)
    parts = []
    if thousands:
        parts.append(("ein" if thousands == 1 else _DE_UNITS[thousands]) + "tausend")
    if hundreds:
        parts.append(("ein" if hundreds == 1 else _DE_UNITS[hundreds]) + "hundert")
    if rest:
        parts.append(_german_below_100(rest))
    return "".join(parts)


_EN_ORDINAL_IRREGULAR = {1: "first", 2: "second", 3: "third", 5: "fifth",
                         8: "eighth", 9: "ninth", 12: "twelfth"}


def english_ordinal(n):
    """1-31: "first", "twenty-second", "thirtieth"."""
    check_int(n, 1, 31, "n")
    if n in _EN_ORDINAL_IRREGULAR:
        return _EN_ORDINAL_IRREGULAR[n]
    if n < 20:
        return EN_SMALL[n] + "th"
    tens, unit = divmod(n, 10)
    if not unit:
        return _EN_TENS[tens][:-1] + "ieth"
    return f"{_EN_TENS[tens]}-{english_ordinal(unit)}"


_DE_ORDINAL_IRREGULAR = {1: "erst", 3: "dritt", 7: "siebt", 8: "acht"}
_DE_CASE_ENDINGS = {"nominative": "e", "dative": "en"}


def german_ordinal(n, case="nominative"):
    """1-31 with the weak ending after a definite article.

    "nominative" (der dritte Mai) ends in -e, "dative" (am dritten Mai) in
    -en. Up to 19 the stem adds -t (zweit-, neunzehnt-), from 20 on -st
    (zwanzigst-, einunddreißigst-); erst-, dritt-, siebt-, acht- are
    irregular.
    """
    check_int(n, 1, 31, "n")
    if case not in _DE_CASE_ENDINGS:
        raise ValueError(f"case must be 'nominative' or 'dative', got {case!r}")
    if n in _DE_ORDINAL_IRREGULAR:
        stem = _DE_ORDINAL_IRREGULAR[n]
    elif n < 20:
        stem = german_cardinal(n) + "t"
    else:
        stem = german_cardinal(n) + "st"
    return stem + _DE_CASE_ENDINGS[case]
