"""Writes fixtures/tasks/knowledge/test.jsonl: the real tier's accuracy-gate items, written for this suite (not drawn
from any public benchmark): capitals, small sums and differences, opposites and irregular plurals, each a 4-way
multiple choice completing a plain sentence ("The capital of Japan is" -> " Tokyo"). Seeded: reruns give the same
file.   cargo xtask reference-data --only knowledge   (python -m reference.knowledge_items [OUT])"""
import json
import random
import sys
from collections import Counter

r = random.Random(13)
capitals = {"France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon", "Japan": "Tokyo",
            "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens", "Austria": "Vienna", "Poland": "Warsaw",
            "Hungary": "Budapest", "Sweden": "Stockholm", "Norway": "Oslo", "Finland": "Helsinki", "Denmark": "Copenhagen",
            "Ireland": "Dublin", "Belgium": "Brussels", "Netherlands": "Amsterdam", "Canada": "Ottawa", "Mexico": "Mexico City",
            "Argentina": "Buenos Aires", "Peru": "Lima", "Chile": "Santiago", "Colombia": "Bogota", "Kenya": "Nairobi",
            "Thailand": "Bangkok", "Vietnam": "Hanoi", "Indonesia": "Jakarta", "Philippines": "Manila", "South Korea": "Seoul",
            "India": "New Delhi", "Iran": "Tehran", "Iraq": "Baghdad", "Turkey": "Ankara", "Cuba": "Havana", "Australia": "Canberra",
            "Switzerland": "Bern", "Czech Republic": "Prague", "Romania": "Bucharest", "Ukraine": "Kyiv", "Israel": "Jerusalem",
            "Saudi Arabia": "Riyadh", "Ethiopia": "Addis Ababa", "Morocco": "Rabat", "Nigeria": "Abuja", "Pakistan": "Islamabad",
            "Venezuela": "Caracas", "Iceland": "Reykjavik"}
opposites = {"hot": "cold", "big": "small", "fast": "slow", "happy": "sad", "light": "dark", "up": "down", "open": "closed",
             "early": "late", "young": "old", "rich": "poor", "strong": "weak", "full": "empty", "wet": "dry", "hard": "soft",
             "loud": "quiet", "high": "low", "long": "short", "thick": "thin", "clean": "dirty", "true": "false", "first": "last",
             "inside": "outside", "left": "right", "day": "night", "win": "lose", "buy": "sell", "push": "pull", "give": "take",
             "begin": "end", "alive": "dead", "cheap": "expensive", "deep": "shallow", "heavy": "light", "north": "south",
             "east": "west", "friend": "enemy", "love": "hate", "question": "answer", "summer": "winter", "remember": "forget"}
plurals = {"mouse": "mice", "child": "children", "foot": "feet", "tooth": "teeth", "man": "men", "woman": "women",
           "goose": "geese", "person": "people", "box": "boxes", "city": "cities", "leaf": "leaves", "knife": "knives",
           "wolf": "wolves", "baby": "babies", "bus": "buses", "dish": "dishes", "ox": "oxen", "cactus": "cacti",
           "potato": "potatoes", "hero": "heroes", "church": "churches", "party": "parties", "wife": "wives", "life": "lives",
           "fish": "fish", "sheep": "sheep", "deer": "deer", "story": "stories", "match": "matches", "glass": "glasses",
           "half": "halves", "shelf": "shelves", "lady": "ladies", "fox": "foxes", "dress": "dresses"}
ARITH = 175


def mc(kind, question, right, wrong):
    ch = list(wrong) + [right]
    r.shuffle(ch)
    return {"kind": kind, "question": question, "choices": ch, "gold": ch.index(right), "answer": right}


def main(out):
    items = []
    cities = sorted(set(capitals.values()))
    for c, cap in capitals.items():
        items.append(mc("capital", f"The capital of {c} is", cap, r.sample([x for x in cities if x != cap], 3)))
    seen = set()
    while len(seen) < ARITH:
        a, b = r.randint(1, 20), r.randint(1, 20)
        op = r.choice(["+", "-"]) if a >= b else "+"
        if (a, op, b) in seen:
            continue
        seen.add((a, op, b))
        ans = a + b if op == "+" else a - b
        near = sorted(x for x in {ans - 2, ans - 1, ans + 1, ans + 2, ans + 10} if x >= 0 and x != ans)
        items.append(mc("arith", f"{a} {op} {b} =", str(ans), [str(x) for x in r.sample(near, 3)]))
    words = sorted(set(opposites.values()) | set(opposites))
    for w, o in opposites.items():
        items.append(mc("opposite", f"The opposite of {w} is", o, r.sample([x for x in words if x not in (w, o)], 3)))
    for w, pl in plurals.items():
        cands = {w + "s", w + "es", w, pl}
        if w.endswith("y"):
            cands.add(w[:-1] + "ys")
        wrong = [x for x in sorted(cands) if x != pl]
        extra = r.sample([x for x in sorted(set(plurals.values())) if x != pl and x not in wrong], 4)
        items.append(mc("plural", f"The plural of {w} is", pl, (wrong + extra)[:3]))
    with open(out, "w") as f:
        for it in items:
            f.write(json.dumps(it, ensure_ascii=False) + "\n")
    print(len(items), dict(Counter(i["kind"] for i in items)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "fixtures/tasks/knowledge/test.jsonl")
