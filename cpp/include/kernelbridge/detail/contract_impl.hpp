// kernelbridge: implementation of contract.hpp, header only (included at the end of contract.hpp).
//
// Split by job: json.hpp (strict JSON), relations.hpp (`requires` language), contract_parse.hpp
// (schema v1 reader/writer), scalar_pack.hpp (kernel-parameter bytes of scalars), validate.hpp (the
// documented validation order).
#pragma once

#include "kernelbridge/detail/json.hpp"
#include "kernelbridge/detail/relations.hpp"
#include "kernelbridge/detail/contract_parse.hpp"
#include "kernelbridge/detail/scalar_pack.hpp"
#include "kernelbridge/detail/validate.hpp"
