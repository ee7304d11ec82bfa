// TEMPORARY until the contract part lands (replace this whole file).
#pragma once
