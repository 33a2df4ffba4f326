#include "shaper/change_plan.hpp"

#include <cstdint>
#include <utility>
#include <variant>
#include <vector>

#include "shaper/distribution_tables.hpp"
#include "shaper/kernel_units.hpp"

namespace shaper {

namespace {

// Compared in kernel units: a model read back from the kernel (after adopt) differs from the user's
// doubles by rounding, yet is the same model for the kernel.
std::vector<std::uint32_t> kernel_loss_words(const LossModel& loss) {
  using namespace kernel_units;
  if (const auto* ge = std::get_if<GilbertElliottLoss>(&loss)) {
    return {1, probability(ge->p), probability(ge->r), ge_h_from_loss_bad(ge->loss_bad),
            ge_k1_from_loss_good(ge->loss_good)};
  }
  if (const auto* gi = std::get_if<FourStateLoss>(&loss)) {
    return {2,
            probability(gi->p13),
            probability(gi->p31),
            probability(gi->p32),
            probability(gi->p23),
            probability(gi->p14)};
  }
  return {0};
}

bool same_loss_model(const LossModel& a, const LossModel& b) {
  return kernel_loss_words(a) == kernel_loss_words(b);
}

}  // namespace

ChangePlan plan_change(const NetemSpec& applied, const NetemSpec& wanted, bool tables_known) {
  ChangePlan plan{wanted, {}};
  NetemSpec& send = plan.to_send;
  // The kernel cannot drop a delay table; if one may be installed and the new spec wants plain
  // uniform jitter, an explicit uniform table gives the same distribution.
  const bool kernel_may_have_delay_table = !tables_known || applied.delay.distribution.has_value();
  if (!send.delay.distribution && send.delay.jitter.count() != 0 && kernel_may_have_delay_table) {
    send.delay.distribution = make_uniform_table();
  }
  plan.encode.send_delay_table =
      send.delay.distribution.has_value() &&
      (!tables_known || applied.delay.distribution != send.delay.distribution);

  // Same for the slot table: uniform slot gaps in [min, max) become a uniform table around the
  // middle.
  const bool applied_slot_table = applied.slot && applied.slot->distribution;
  const bool kernel_may_have_slot_table = !tables_known || applied_slot_table;
  if (send.slot && !send.slot->distribution && kernel_may_have_slot_table) {
    SlotDistribution uniform;
    uniform.delay = (send.slot->min_delay + send.slot->max_delay) / 2;
    uniform.jitter = (send.slot->max_delay - send.slot->min_delay) / 2;
    uniform.table = make_uniform_table();
    // Even with min == max (jitter 0) the distribution must be sent: tabledist(delay, 0) = delay,
    // whereas leaving it out would make the old table draw around a dist_delay of 0.
    send.slot->distribution = std::move(uniform);
  }
  const bool send_slot_has_table = send.slot && send.slot->distribution;
  plan.encode.send_slot_table =
      send_slot_has_table && (!tables_known || !applied_slot_table ||
                              applied.slot->distribution->table != send.slot->distribution->table);

  // The GE / 4-state chain keeps its state only when the model is unchanged; any change of model or
  // parameters restarts it (sending the model is the only way to set new parameters).
  plan.encode.loss =
      same_loss_model(applied.loss, wanted.loss) ? LossEncoding::kKeepRunning : LossEncoding::kFull;
  return plan;
}

}  // namespace shaper
