module {
  func.func @forward(%tokens: tensor<?x?xi32>) -> tensor<f32> {
    %wte = mt.param "wte" normal(2.0e-02) : tensor<16x8xf32>
    %e = mt.embedding %wte %tokens : (tensor<16x8xf32>, tensor<?x?xi32>) -> tensor<?x?x8xf32>
  }
}
