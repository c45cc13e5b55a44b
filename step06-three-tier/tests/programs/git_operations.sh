#!/usr/bin/env bash
# git_operations.sh REPO: everyday git work on a copy of REPO, printing results that do not depend
# on the malloc underneath: clone, log, grep (threaded), commits with fixed dates, diff, blame,
# branch and merge, repack and gc (threaded), fsck, archive. Run by dropin_same_output.sh: the
# snapshot of REPO is taken once, in $DROPIN_SHARED, so both runs start from the same commits.
# A REPO that is not a git work tree (a source tarball) is committed into a new repository.
set -euo pipefail
repo=$1

export HOME=$DROPIN_SCRATCH/home GIT_CONFIG_NOSYSTEM=1 GIT_CONFIG_GLOBAL=/dev/null
export GIT_AUTHOR_NAME=Tester GIT_AUTHOR_EMAIL=tester@example.org
export GIT_COMMITTER_NAME=Tester GIT_COMMITTER_EMAIL=tester@example.org
export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
export LC_ALL=C
mkdir -p "$HOME"

origin=$DROPIN_SHARED/origin.git
if [ ! -d "$origin" ]; then
  if git -C "$repo" rev-parse --verify -q HEAD >/dev/null 2>&1; then
    git -c safe.directory='*' clone -q --bare --no-local "$repo" "$origin"
  else
    git init -q "$DROPIN_SHARED/import"
    cp -r "$repo"/. "$DROPIN_SHARED/import/"
    rm -rf "$DROPIN_SHARED/import/build"
    git -C "$DROPIN_SHARED/import" add -A
    git -C "$DROPIN_SHARED/import" commit -qm "import"
    git clone -q --bare "$DROPIN_SHARED/import" "$origin"
  fi
fi

git clone -q "$origin" work
cd work
git config pack.threads 2
git config grep.threads 2
git config user.useConfigOnly false

echo "commits: $(git rev-list --count HEAD)"
echo "files: $(git ls-files | wc -l)"
git log --format='%H %s' -n 20
git grep -c -i -e alloc -e free >"$DROPIN_SCRATCH/grep.txt"
echo "grep: $(wc -l <"$DROPIN_SCRATCH/grep.txt") files match, $(sha256sum <"$DROPIN_SCRATCH/grep.txt")"
git log -p | sha256sum

# New history with fixed dates: the same commit ids on any malloc.
git switch -q -c exercise
for i in $(seq 1 15); do
  seq "$i" 40 "$((i * 500))" >"numbers$((i % 4)).txt"
  printf 'line %s\n' $(seq 1 "$i") >>log.txt
  git add -A
  git commit -qm "exercise $i"
done
git log --format='%H %s' -n 5
git diff --stat HEAD~10 HEAD
git blame --line-porcelain log.txt | sha256sum
git switch -q -
git merge -q --no-ff -m "merge exercise" exercise
echo "merged: $(git rev-parse HEAD)"
git repack -adfq
git gc -q
git fsck --no-progress --strict
git count-objects -v | grep -E '^(count|in-pack|packs|garbage)'
git archive --format=tar HEAD | sha256sum
