# Malformed inputs beyond bad_input.sh, one case per class of defect: integer
# options past what they are stored in, non-finite reals, over-long paths and
# malformed decks. Each must give
# exactly one "rlfuse: error:" line naming the culprit, a non-zero exit, and
# leave an earlier run's files byte-identical.
. regression/lib.sh
d="$RLFUSE_TMP/badfiles"; deck=regression/decks/tiny.deck; mkdir -p $d
rlfuse -options_file $deck -output_dir $d/good -sft_steps 2 >$d/good.log 2>&1 || not_ok "reference run"
rlfuse -mode data -data_output $d/data.h5 -data_count 4 -task_len_min 4 -task_len_max 4 >/dev/null 2>&1 || not_ok "make data"
ck=$d/good/final.h5
keep=$d/good

expect() { local what=$1 pat=$2; shift 2; expect_error "$what" "$pat" "$@" -output_dir $d/good; }
expect "integer option past 32 bits"    "-sft_steps: 4294967297 is out of range" -options_file $deck -sft_steps 4294967297
expect "seed past 32 bits"              "-seed: 4294967297 is out of range" -options_file $deck -seed 4294967297
expect "infinite real option"           "-policy_lr: 'inf' is not a finite number" -options_file $deck -policy_lr inf
expect "NaN real option"                "-policy_lr: 'nan' is not a finite number" -options_file $deck -policy_lr nan
expect "infinite plan size"             "-plan_bucket_mb: 'inf' is not a finite number" -options_file $deck -plan_bucket_mb inf
long=$d/$(printf 'x%.0s' $(seq 4100))
keep= expect_error "output_dir longer than a path" "-output_dir: value of 4[0-9]* characters is longer than the 4095 allowed" -options_file $deck -output_dir $long

# decks: each malformed the way PETSc would answer with a traceback
printf -- '-mode sft\ngarbage line\n' >$d/garbage.deck
printf '\xef\xbb\xbf-mode sft\n' >$d/bom.deck
printf -- '-mode sft\n-sft_steps 2\x00\x01\n' >$d/binary.deck
"$PYTHON" -c "print('-sft_steps ' + '1' * 200000)" >$d/longline.deck
printf -- '-mode sft -sft_steps 2\n' >$d/extra.deck
printf -- '-options_file %s\n' $d/self.deck >$d/self.deck
printf -- '-options_file %s\n' $d/b.deck >$d/a.deck; printf -- '-options_file %s\n' $d/a.deck >$d/b.deck
expect "deck: a garbage line"           "garbage.deck line 2: 'garbage' is not an option" -options_file $d/garbage.deck
expect "deck: UTF-8 byte-order mark"    "bom.deck starts with a UTF-8 byte-order mark" -options_file $d/bom.deck
expect "deck: binary bytes"             "binary.deck line 2: binary byte 0x00"  -options_file $d/binary.deck
expect "deck: a directory"              "-options_file $d: is a directory"      -options_file $d
expect "deck: a 200 kB line"            "longline.deck line 1: 2000[0-9]* characters" -options_file $d/longline.deck
expect "deck: extra values on a line"   "extra.deck line 1: extra value '-sft_steps'" -options_file $d/extra.deck
expect "deck: includes itself"          "self.deck includes itself"             -options_file $d/self.deck
expect "deck: two decks include each other" "a.deck includes itself through .*b.deck" -options_file $d/a.deck
finish
