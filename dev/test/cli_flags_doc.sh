# dev/test/cli_flags_doc.sh -- README.md's flag table ("## Flags") against ./train_gpt_cpu --help, which is generated
# from the one flag table (llmc/train_flags.h): the same long names, each with the same short name and the same
# default (numbers compared as numbers, `none` or `''` for an empty string). A flag added to the table without a README
# row, a README row for a removed flag, or a default changed on one side only fails here.
source "$(dirname "$0")/lib_cli.sh"
$TRAIN_BIN --help > "$TMP/help.txt" 2>&1
check $? "--help exits 0"
python3 - README.md "$TMP/help.txt" <<'PY'
import re, sys
readme, helptext = open(sys.argv[1]).read(), open(sys.argv[2]).read()
section = readme[readme.index("\n## Flags"):]
section = section[:section.index("\n## ", 5)]
doc = {}
for line in section.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) < 4 or not cells[1].startswith("`--"):
        continue
    long_name = cells[1].strip("`")[2:]
    doc[long_name] = (cells[0].strip("`").lstrip("-") or None, cells[2].strip("`"))
help_ = {}
for m in re.finditer(r"^  (?:-(\S+), )?--(\S+) <\w+>\s+.*\(default: (.*?)(?:; range [^)]*)?\)$", helptext, re.M):
    help_[m.group(2)] = (m.group(1), m.group(3))
def same_default(d, h):
    if h == "''":
        return d in ("none", "''", "")
    try:
        return float(d) == float(h)
    except ValueError:
        return d == h
problems = []
for name in sorted(set(doc) | set(help_)):
    if name not in doc:
        problems.append("--%s is in --help but has no README row" % name)
    elif name not in help_:
        problems.append("README documents --%s, which --help does not list" % name)
    else:
        (ds, dd), (hs, hd) = doc[name], help_[name]
        if ds != hs:
            problems.append("--%s: README's short name %s, --help's %s" % (name, ds, hs))
        if not same_default(dd, hd):
            problems.append("--%s: README's default '%s', --help's '%s'" % (name, dd, hd))
for p in problems:
    print("#", p)
print("# %d flags in --help, %d README rows, %d problems" % (len(help_), len(doc), len(problems)))
sys.exit(0 if help_ and not problems else 1)
PY
check $? "README.md's flag table lists every flag of --help with its short name and default, and nothing else"
