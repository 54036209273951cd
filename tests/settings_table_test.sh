#!/usr/bin/env bash
# Checks docs/settings.md against the code: every TROUPE_* variable the code or scripts read is in the
# table, and every variable in the table is read somewhere. Usage: settings_table_test.sh <source root>
set -euo pipefail
root="${1:?source root}"
doc="$root/docs/settings.md"
read_by_code=$( (grep -rhoE '(getenv|Env|EnvInt|EnvDouble|EnvChoice)\("TROUPE_[A-Z0-9_]+"' "$root"/{base,actors,engine,tensor,op,graph,ops,io,kvstore,train,tools,bench,examples,tests} \
                   --include='*.cc' --include='*.h' --include='*.cu' 2>/dev/null || true;
                 grep -rhoE '\$\{?TROUPE_[A-Z0-9_]+' "$root/scripts" 2>/dev/null || true) |
                grep -oE 'TROUPE_[A-Z0-9_]+' | sort -u)
in_doc=$(grep -oE '`TROUPE_[A-Z0-9_]+`' "$doc" | tr -d '`' | sort -u)
missing=$(comm -23 <(echo "$read_by_code") <(echo "$in_doc"))
stale=$(comm -13 <(echo "$read_by_code") <(echo "$in_doc"))
status=0
if [[ -n "$missing" ]]; then echo "read by the code but not in docs/settings.md:"; echo "$missing"; status=1; fi
if [[ -n "$stale" ]]; then echo "in docs/settings.md but read nowhere:"; echo "$stale"; status=1; fi
[[ $status -eq 0 ]] && echo "settings table matches the code ($(echo "$in_doc" | wc -l) variables)"
exit $status
