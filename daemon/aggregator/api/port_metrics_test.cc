// Fleet port metrics: publication, unknown rates as NaN, vanished ports.
#include "daemon/aggregator/api/port_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fw::aggregator {
namespace {

fabricwatch::v1::PortSample* AddPort(fabricwatch::v1::CounterBatch& b, const std::string& dev,
                                     const std::string& state, double err) {
  auto* p = b.add_ports();
  p->set_device(dev);
  p->set_port(1);
  p->set_state(state);
  p->set_phys_state(state == "ACTIVE" ? "LinkUp" : "Polling");
  p->set_rate_gbps(400);
  p->set_error_rate(err);
  p->set_congestion_ratio(0.25);
  return p;
}

TEST(PortMetricsTest, PublishesAndForgetsPorts) {
  metrics::Registry reg;
  PortMetrics pm(reg);
  fabricwatch::v1::CounterBatch b;
  AddPort(b, "mlx5_0", "ACTIVE", 0);
  AddPort(b, "mlx5_1", "DOWN", std::numeric_limits<double>::quiet_NaN());
  pm.Update("n1", b);
  std::string text = reg.RenderToString();
  EXPECT_NE(text.find("fabricwatch_nic_port_up{node=\"n1\",device=\"mlx5_0\",port=\"1\"} 1\n"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_nic_port_up{node=\"n1\",device=\"mlx5_1\",port=\"1\"} 0\n"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_nic_port_error_rate{node=\"n1\",device=\"mlx5_1\",port=\"1\"} "
                      "NaN\n"),
            std::string::npos);
  EXPECT_NE(text.find("fabricwatch_nic_port_congestion_ratio{node=\"n1\",device=\"mlx5_0\","
                      "port=\"1\"} 0.25\n"),
            std::string::npos);
  auto ports = pm.PortsOf("n1");
  ASSERT_EQ(ports.size(), 2u);
  EXPECT_TRUE(ports["mlx5_0/1"].up);

  fabricwatch::v1::CounterBatch only0;
  AddPort(only0, "mlx5_0", "ACTIVE", 0);
  pm.Update("n1", only0);
  EXPECT_EQ(reg.RenderToString().find("mlx5_1"), std::string::npos);
  pm.RemoveNode("n1");
  EXPECT_EQ(reg.RenderToString().find("node=\"n1\""), std::string::npos);
}

}  // namespace
}  // namespace fw::aggregator
