"""Dates and clock times: valid day/month pairs, weekdays, analog ("half past
seven" → "halb acht") and digital ("14:05" → "vierzehn Uhr fünf") times."""

from keras_transformer.datasets.synthetic_en_de.numbers import check_int
from keras_transformer.datasets.synthetic_en_de.numbers import EN_SMALL
from keras_transformer.datasets.synthetic_en_de.numbers import english_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import english_ordinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_cardinal
from keras_transformer.datasets.synthetic_en_de.numbers import german_ordinal


MONTHS = (  # (English, German, days; February allows the 29th)
    ("January", "Januar", 31), ("February", "Februar", 29),
    ("March", "März", 31), ("April", "April", 30), ("May", "Mai", 31),
    ("June", "Juni", 30), ("July", "Juli", 31), ("August", "August", 31),
    ("September", "September", 30), ("October", "Oktober", 31),
    ("November", "November", 30), ("December", "Dezember", 31),
)
WEEKDAYS = (
    ("Monday", "Montag"), ("Tuesday", "Dienstag"), ("Wednesday", "Mittwoch"),
    ("Thursday", "Donnerstag"), ("Friday", "Freitag"), ("Saturday", "Samstag"),
    ("Sunday", "Sonntag"),
)


def date_phrase(day, month, *, style="of", case="nominative"):
    """A date as (English, German) noun phrases, without a preposition.

    style "of": "the third of May"; style "month_day": "May 3". German is
    always words with the article in `case`: "der dritte Mai" (nominative)
    or "dem dritten Mai" (dative). Invalid dates (30 February) raise.
    """
    check_int(month, 1, 12, "month")
    en_month, de_month, days = MONTHS[month - 1]
    check_int(day, 1, days, f"day (of {en_month})")
    if style == "of":
        english = f"the {english_ordinal(day)} of {en_month}"
    elif style == "month_day":
        english = f"{en_month} {day}"
    else:
        raise ValueError(f"style must be 'of' or 'month_day', got {style!r}")
    article = {"nominative": "der", "dative": "dem"}.get(case)
    if article is None:
        raise ValueError(f"case must be 'nominative' or 'dative', got {case!r}")
    return english, f"{article} {german_ordinal(day, case)} {de_month}"


ANALOG_MINUTES = (0, 5, 10, 15, 20, 30, 40, 45, 50, 55)


def analog_time(hour, minute, *, oclock=True):
    """A 12-hour spoken clock time as (English, German).

    minute is one of ANALOG_MINUTES. 7:30 is "half past seven" / "halb acht"
    (German counts towards the next hour), 3:15 "quarter past three" /
    "Viertel nach drei", 3:45 "quarter to four" / "Viertel vor vier". Full
    hours are "seven o'clock" / "sieben Uhr" ("ein Uhr" for one), or with
    oclock=False just "seven" / "sieben" ("eins").
    """
    check_int(hour, 1, 12, "hour")
    if minute not in ANALOG_MINUTES:
        raise ValueError(f"minute must be one of {ANALOG_MINUTES}, got {minute!r}")
    next_hour = hour % 12 + 1
    en_hour, en_next = EN_SMALL[hour], EN_SMALL[next_hour]
    # A bare hour counts ("um eins"); only "ein Uhr" drops the s.
    de_hour, de_next = german_cardinal(hour), german_cardinal(next_hour)
    if minute == 0:
        if oclock:
            return f"{en_hour} o'clock", ("ein" if hour == 1 else de_hour) + " Uhr"
        return en_hour, de_hour
    if minute == 15:
        return f"quarter past {en_hour}", f"Viertel nach {de_hour}"
    if minute == 30:
        return f"half past {en_hour}", f"halb {de_next}"
    if minute == 45:
        return f"quarter to {en_next}", f"Viertel vor {de_next}"
    if minute < 30:
        return (f"{english_cardinal(minute)} past {en_hour}",
                f"{german_cardinal(minute)} nach {de_hour}")
    return (f"{english_cardinal(60 - minute)} to {en_next}",
            f"{german_cardinal(60 - minute)} vor {de_next}")


def digital_time(hour, minute):
    """A 24-hour time: (“14:05”, “vierzehn Uhr fünf”); 1:00 is “ein Uhr”."""
    check_int(hour, 0, 23, "hour")
    check_int(minute, 0, 59, "minute")
    german = ("ein" if hour == 1 else german_cardinal(hour)) + " Uhr"
    if minute:
        german += " " + german_cardinal(minute)
    return f"{hour}:{minute:02d}", german
