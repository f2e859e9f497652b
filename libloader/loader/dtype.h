// Element types of a tensor, with PyTorch's names and sizes.
//
//   loader::DType t = loader::DType::Float32;
//   loader::element_size(t);   // 4
//   loader::dtype_name(t);     // "float32"  (torch.float32)
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace loader {

enum class DType : uint8_t {
  Bool,
  UInt8,
  Int8,
  Int16,
  Int32,
  Int64,
  Float16,
  BFloat16,
  Float32,
  Float64,
  Complex64,  ///< two float32 (real, imaginary); stored and copied, no arithmetic
};

constexpr int kNumDTypes = 11;

/// Bytes per element.
size_t element_size(DType t);
/// PyTorch's short name: "bool", "uint8", ..., "float32", "complex64".
const char* dtype_name(DType t);
/// Parses a short name ("float32") or torch's ("torch.float32"); nullopt when unknown.
std::optional<DType> dtype_from_name(const std::string& name);
bool is_floating(DType t);  ///< float16, bfloat16, float32, float64
bool is_integral(DType t);  ///< uint8, int8..int64 (not bool)

// IEEE half and bfloat16 conversions (round to nearest even, NaN preserved).
uint16_t float_to_half(float f);
float half_to_float(uint16_t h);
uint16_t float_to_bfloat16(float f);
float bfloat16_to_float(uint16_t b);

/// Maps a C++ element type to its DType (for typed accessors).
template <class T> struct dtype_of;
template <> struct dtype_of<bool> { static constexpr DType value = DType::Bool; };
template <> struct dtype_of<uint8_t> { static constexpr DType value = DType::UInt8; };
template <> struct dtype_of<int8_t> { static constexpr DType value = DType::Int8; };
template <> struct dtype_of<int16_t> { static constexpr DType value = DType::Int16; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::Int32; };
template <> struct dtype_of<int64_t> { static constexpr DType value = DType::Int64; };
template <> struct dtype_of<float> { static constexpr DType value = DType::Float32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::Float64; };

}  // namespace loader
