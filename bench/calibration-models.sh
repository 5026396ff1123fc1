# The models bench/calibrate.sh profiles to calibrate mtc estimate's kernel families, none
# of them a benchmark's: GPT-2 350M at micro-batches 4 and 16; GPT-2 774M (hidden 1280) at
# 8; and 350M over 2048 positions at 2, with its 16 heads of 64 and with 8 heads of 128
# (each family's runs at several sizes, attention at two lengths and two head sizes).
# Sourced, from the repository's root, by scripts/bundle.sh (which compiles them) and by
# bench/calibrate-families.sh (which estimates them).
calibration_models=(gpt2-350m gpt2-350m-mb16 gpt2-774m-mb8 gpt2-350m-s2048-h16 gpt2-350m-s2048-h8)

# calibration_model NAME DIR: writes DIR/NAME.mlir, and prints its sequence length and
# micro-batch size.
calibration_model() {
  case $1 in
  gpt2-350m) cp models/gpt2-350m.mlir "$2/$1.mlir" && echo 1024 4 ;;
  gpt2-350m-mb16) cp models/gpt2-350m.mlir "$2/$1.mlir" && echo 1024 16 ;;
  gpt2-774m-mb8) cp models/gpt2-774m.mlir "$2/$1.mlir" && echo 1024 8 ;;
  gpt2-350m-s2048-h*)
    sed -e "s/heads = 16 : i64/heads = ${1##*-h} : i64/" \
      -e '/wpe/s/tensor<1024x1024xf32>/tensor<2048x1024xf32>/g' models/gpt2-350m.mlir >"$2/$1.mlir" &&
      grep -q "heads = ${1##*-h} : i64" "$2/$1.mlir" && grep -q 'tensor<2048x1024xf32>' "$2/$1.mlir" ||
      { echo "calibration_model: models/gpt2-350m.mlir no longer reads as $1 expects" >&2; return 1; }
    echo 2048 2
    ;;
  *) echo "calibration_model: no model $1" >&2; return 1 ;;
  esac
}
