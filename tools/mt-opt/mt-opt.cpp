// mt-opt: runs any mtc pass alone, for lit tests and pass development.
#include "compiler/Registration.h"
#include "mlir/Tools/mlir-opt/MlirOptMain.h"

int main(int argc, char **argv) {
  mlir::DialectRegistry registry;
  mtc::registerAll(registry);
  return mlir::asMainReturnCode(mlir::MlirOptMain(argc, argv, "mtc pass driver\n", registry));
}
