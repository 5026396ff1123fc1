// One plan instruction built for a backend test: its opcode, `inputs` and `outputs`
// operands (their indices do not matter to a backend), and whatever fields `set` adds.
#ifndef MT_TEST_UNIT_TESTINSTRUCTION_H
#define MT_TEST_UNIT_TESTINSTRUCTION_H

#include "plan_generated.h"

#include <cstdint>
#include <vector>

namespace mt::test {

struct TestInstruction {
  flatbuffers::FlatBufferBuilder fbb;
  const plan::Instruction *inst = nullptr;
  template <typename Set>
  TestInstruction(plan::Opcode opcode, int inputs, int outputs, Set set) {
    std::vector<uint32_t> in(inputs), out(outputs);
    auto ins = fbb.CreateVector(in), outs = fbb.CreateVector(out);
    plan::InstructionBuilder b(fbb);
    b.add_opcode(opcode);
    b.add_inputs(ins);
    b.add_outputs(outs);
    set(b);
    fbb.Finish(b.Finish());
    inst = flatbuffers::GetRoot<plan::Instruction>(fbb.GetBufferPointer());
  }
};

} // namespace mt::test

#endif // MT_TEST_UNIT_TESTINSTRUCTION_H
